// @leash/openai-agents: Leash for the OpenAI Agents SDK (JS) — guardrails, needsApproval and leashTool().
// It decides tool calls through the SDK's own hooks; it is not a model provider and adds no runner.

export { LeashToolStopped } from "@leash/core";
export {
  type LeashAgentsOptions,
  type LeashGuardrails,
  type LeashPendingRequest,
  leashGuardrails,
} from "./guardrails.js";
export { leashTool } from "./leash-tool.js";
