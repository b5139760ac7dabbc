// What every RPC of the daemon's request handler works with: its options, the session checks and
// settlements it keeps across requests, the call gate and the daemon's clock. No behaviour.
import type { CallGate } from "./call-gate.js";
import type { SessionAccess, Settlements } from "./handler-sessions.js";
import type { HandlerOptions } from "./handler-types.js";

export interface HandlerScope {
  readonly options: HandlerOptions;
  readonly sessions: SessionAccess;
  readonly settlements: Settlements;
  /** Holds a PreExec a moment for sessions about to call too; null: every call goes at once. */
  readonly gate: CallGate | null;
  /** The daemon's time in nanoseconds, as the answers carry it. */
  readonly nowNs: () => bigint;
}
