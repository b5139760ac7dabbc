// @leash/client: the agent's side of the Leash sidecar daemon (SHACKLE SP/1.0 over a Unix socket or gRPC).
// It decides nothing: the daemon does; the client fails closed (DENY) whenever it cannot trust an answer.

export {
  type Client,
  createClient,
  DEFAULT_CONTROL_TIMEOUT_MS,
  DEFAULT_HEARTBEAT_INTERVAL_MS,
  DEFAULT_RECONNECT,
  DEFAULT_TIMEOUT_MS,
} from "./client.js";
export { LeashDenied, LeashError, type LeashErrorCode, LeashHitl } from "./errors.js";
export { type GuardOptions, guard } from "./guard.js";
export { DEFAULT_HITL_WAIT_MS, waitBudgetMs } from "./hitl-wait.js";
export { TAIL_POLL_WAIT_MS } from "./tail.js";
export type * from "./types.js";
