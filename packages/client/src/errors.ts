// The client's errors, shaped exactly like @leash/engine's (same names, codes and Symbol.for marker),
// so code written against the engine's guard() catches the client's. Verdicts are results, not errors.
import type { PreExecResult } from "./types.js";

// The engine's marker: LeashError.isInstance of either package recognizes errors of both, without
// the client importing the engine (and with it budget-guard, chain, outbox, ajv and yaml).
const MARKER = Symbol.for("leash.engine.LeashError");

export type LeashErrorCode =
  | "INVALID_ARGUMENT"
  | "DENIED"
  | "HITL_REQUIRED"
  /** No connection to the daemon, or it closed with the request in flight. */
  | "DAEMON_UNAVAILABLE"
  /** No answer within the request's timeout. */
  | "TIMEOUT"
  /** An answer that does not parse, does not authenticate or does not answer the request. */
  | "BAD_RESPONSE"
  /** The daemon answered with an SP/1.0 Error (its Appendix B code is in the message). */
  | "DAEMON_ERROR"
  /** The client was closed. */
  | "CLOSED";

export class LeashError extends Error {
  readonly [MARKER] = true;
  override name = "LeashError";
  constructor(
    readonly code: LeashErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
  static isInstance(error: unknown): error is LeashError {
    return typeof error === "object" && error !== null && MARKER in error;
  }
}

/** Thrown by guard() when the verdict is DENY: the tool did not run. `result` holds the receipt. */
export class LeashDenied extends LeashError {
  override name = "LeashDenied";
  readonly verdict = "DENY" as const;
  readonly reason: string;
  readonly sessionId: string;
  readonly callNumber: number;
  constructor(readonly result: PreExecResult) {
    super("DENIED", `Leash denied the call (${result.reason}); the tool did not run`);
    this.reason = result.reason;
    this.sessionId = result.session_id;
    this.callNumber = result.call_number;
  }
}

/** Thrown by guard() when the verdict is HITL: a human must decide; the tool did not run. */
export class LeashHitl extends LeashError {
  override name = "LeashHitl";
  readonly verdict = "HITL" as const;
  readonly reason: string;
  readonly sessionId: string;
  readonly callNumber: number;
  constructor(readonly result: PreExecResult) {
    super("HITL_REQUIRED", `Leash needs a human decision (${result.reason}); the tool did not run`);
    this.reason = result.reason;
    this.sessionId = result.session_id;
    this.callNumber = result.call_number;
  }
}
