export * from "./audit.js";
export * from "./clock.js";
export * from "./substrate.js";
