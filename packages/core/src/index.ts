export * from "./types.js";
export * from "./ports/index.js";
