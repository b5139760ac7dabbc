// @leash/mcp: an MCP proxy under Leash — every tools/call is decided (ALLOW / DENY / HITL) and recorded
// before the MCP server sees it; everything else passes through. The `leash mcp` command runs it.
export {
  loadMcpConfig,
  type McpProxyConfig,
  parseMcpConfig,
  sessionGuardConfig,
  type ToolPolicy,
  type ToolSettings,
} from "./config.js";
export { COST_META_KEY, type ReportedCost, reportedCost } from "./cost.js";
export { McpProxyError, type McpProxyErrorCode } from "./errors.js";
export {
  clientGate,
  type EngineGateOptions,
  engineGate,
  type GateCall,
  type GateVerdict,
  type HitlAnswers,
  type HitlWaitOutcome,
  type LeashGate,
  type Settlement,
} from "./gate.js";
export {
  connectUpstream,
  createLeashProxy,
  DECISION_META_KEY,
  DEFAULT_HITL_TIMEOUT_MS,
  type LeashProxy,
  type LeashProxyOptions,
  type PolicyToolView,
} from "./proxy.js";
export { type UpstreamSpec, upstreamTransport } from "./upstream.js";
export { denialText, pendingText } from "./words.js";
