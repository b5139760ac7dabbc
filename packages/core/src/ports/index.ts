export * from "./audit.js";
export * from "./clock.js";
export * from "./messages.js";
export * from "./substrate.js";
export * from "./write-batch.js";
