export { type LeashAdapterOptions, paramsOf, toolGateOptions } from "./adapter-options.js";
export * from "./decider.js";
export { createToolGate, LeashToolStopped, type ToolGate, type ToolGateOptions } from "./tool-gate.js";
export { verdictMessage } from "./verdict-message.js";
