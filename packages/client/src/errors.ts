// The client's errors, shaped exactly like @leash/engine's (same names, codes and Symbol.for markers),
// so code written against the engine's guard() catches the client's. Verdicts are results, not errors.
import { LeashBaseError } from "@leash/core";
import type { PreExecResult } from "./types.js";

export type LeashErrorCode =
  | "invalid_argument"
  | "denied"
  | "hitl_required"
  /** No connection to the daemon, or it closed with the request in flight. */
  | "daemon_unavailable"
  /** No answer within the request's timeout. */
  | "timeout"
  /** An answer that does not parse, does not authenticate or does not answer the request. */
  | "bad_response"
  /** The daemon refused our HMAC key or key id (socket): the key or key id is wrong. */
  | "auth_failed"
  /** The daemon answered with an SP/1.0 Error (its Appendix B code is in the message). */
  | "daemon_error"
  /** The client was closed. */
  | "closed";

// The engine's markers: LeashError.isInstance of either package recognizes errors of both, without
// the client importing the engine (and with it budget-guard, chain, outbox, ajv and yaml).
export class LeashError extends LeashBaseError<LeashErrorCode> {
  static override readonly marker: symbol = Symbol.for("leash.engine.LeashError");
  override name = "LeashError";
}

/** Thrown by guard() when the verdict is DENY: the tool did not run. `result` holds the receipt. */
export class LeashDenied extends LeashError {
  static override readonly marker = Symbol.for("leash.engine.LeashDenied");
  override name = "LeashDenied";
  readonly verdict = "DENY" as const;
  readonly reason: string;
  readonly sessionId: string;
  readonly callNumber: number;
  constructor(readonly result: PreExecResult) {
    super("denied", `Leash denied the call (${result.reason}); the tool did not run`);
    this.reason = result.reason;
    this.sessionId = result.session_id;
    this.callNumber = result.call_number;
  }
}

/** Thrown by guard() when the verdict is HITL: a human must decide; the tool did not run. */
export class LeashHitl extends LeashError {
  static override readonly marker = Symbol.for("leash.engine.LeashHitl");
  override name = "LeashHitl";
  readonly verdict = "HITL" as const;
  readonly reason: string;
  readonly sessionId: string;
  readonly callNumber: number;
  constructor(readonly result: PreExecResult) {
    super("hitl_required", `Leash needs a human decision (${result.reason}); the tool did not run`);
    this.reason = result.reason;
    this.sessionId = result.session_id;
    this.callNumber = result.call_number;
  }
}
