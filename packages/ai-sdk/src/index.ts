// @leash/ai-sdk: Leash for the Vercel AI SDK — leashTools() decides every tool call before it runs.
// It wraps a tool set; it is not a model provider and changes nothing else in the SDK.

export { LeashToolStopped } from "@leash/core";
export { type LeashToolsOptions, leashTools } from "./leash-tools.js";
