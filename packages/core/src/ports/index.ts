export * from "./substrate.js";
