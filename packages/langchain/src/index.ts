// @leash/langchain: Leash for LangChain.js v1 — an agent middleware and a single-tool wrapper.
// Both decide each tool call before it runs; neither changes the model, the prompts or the graph.

export { LeashToolStopped } from "@leash/core";
export type { LeashLangChainOptions } from "./gate-options.js";
export { leashTool } from "./leash-tool.js";
export { leashMiddleware, stoppedMessage } from "./middleware.js";
