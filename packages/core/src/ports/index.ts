export * from "./clock.js";
export * from "./substrate.js";
