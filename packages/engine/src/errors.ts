// The engine's errors: one small hierarchy with stable codes (spec Appendix B where one fits).
// Verdicts are not errors; LeashDenied/LeashHitl exist only for the guard() wrapper to throw.
import type { HitlRequest, Reason, Verdict } from "@leash/core";
import type { EngineReason, EvaluateResult } from "./types.js";

const MARKER = Symbol.for("leash.engine.LeashError");

export type LeashErrorCode =
  | "SESSION_NOT_FOUND"
  | "SESSION_EXISTS"
  | "INVALID_ARGUMENT"
  | "NO_PENDING_REQUEST"
  | "HITL_ALREADY_DECIDED"
  | "RESERVATION_NOT_FOUND"
  | "SETTLEMENT_CONFLICT"
  | "CONFIG_INVALID"
  | "KEY_NOT_IN_FORCE"
  | "MISSING_DEPENDENCY"
  | "CHAIN_UNVERIFIED"
  | "DENIED"
  | "HITL_REQUIRED";

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
  readonly verdict: Verdict = "DENY";
  readonly reason: Reason | EngineReason;
  readonly sessionId: string;
  readonly callNumber: number;
  constructor(readonly result: EvaluateResult) {
    super("DENIED", `Leash denied the call (${result.reason}); the tool did not run`);
    this.reason = result.reason;
    this.sessionId = result.session_id;
    this.callNumber = result.call_number;
  }
}

/** Thrown by guard() when the verdict is HITL: a human must decide; the tool did not run. */
export class LeashHitl extends LeashError {
  override name = "LeashHitl";
  readonly verdict: Verdict = "HITL";
  readonly reason: Reason | EngineReason;
  readonly sessionId: string;
  readonly callNumber: number;
  constructor(readonly result: EvaluateResult) {
    super("HITL_REQUIRED", `Leash needs a human decision (${result.reason}); the tool did not run`);
    this.reason = result.reason;
    this.sessionId = result.session_id;
    this.callNumber = result.call_number;
  }
}

/**
 * Thrown by resume() when the request it would answer already has its answer (another operator's,
 * perhaps a moment earlier): each request takes exactly one. Nothing was recorded for this attempt.
 */
export class LeashAlreadyDecided extends LeashError {
  override name = "LeashAlreadyDecided";
  readonly requestId: string;
  readonly sessionId: string;
  readonly callNumber: number;
  readonly decision: string | null;
  readonly operatorId: string | null;
  constructor(request: HitlRequest) {
    const answer =
      request.decision === null
        ? `closed (${request.status.toLowerCase()})`
        : `decided: ${request.decision} by ${JSON.stringify(request.operator_id)}`;
    super(
      "HITL_ALREADY_DECIDED",
      `request ${request.request_id} (call ${request.call_number}) of session ${request.session_id} was already ${answer}`,
    );
    this.requestId = request.request_id;
    this.sessionId = request.session_id;
    this.callNumber = request.call_number;
    this.decision = request.decision;
    this.operatorId = request.operator_id;
  }
}
