// The engine's errors: one small hierarchy on the core error base, with stable snake_case codes.
// Verdicts are not errors; LeashDenied/LeashHitl exist only for the guard() wrapper to throw.
import { type HitlRequest, LeashBaseError, type Reason, type Verdict } from "@leash/core";
import type { EngineReason, EvaluateResult } from "./types.js";

export type LeashErrorCode =
  | "session_not_found"
  | "session_exists"
  | "invalid_argument"
  | "no_pending_request"
  | "hitl_already_decided"
  | "hitl_expired"
  | "hitl_not_found"
  | "reservation_not_found"
  | "settlement_conflict"
  | "config_invalid"
  | "key_not_in_force"
  | "missing_dependency"
  | "chain_unverified"
  | "state_unverified"
  | "denied"
  | "hitl_required";

/**
 * Every error the engine throws; `code` is stable, snake_case and meant for programs. The codes were
 * spelled in capitals before (`INVALID_ARGUMENT`); `legacyCode` answers with that for one release.
 */
export class LeashError extends LeashBaseError<LeashErrorCode> {
  static override readonly marker: symbol = Symbol.for("leash.engine.LeashError");
  static override readonly legacyCodes: Readonly<Record<string, string>> = {
    session_not_found: "SESSION_NOT_FOUND",
    session_exists: "SESSION_EXISTS",
    invalid_argument: "INVALID_ARGUMENT",
    no_pending_request: "NO_PENDING_REQUEST",
    hitl_already_decided: "HITL_ALREADY_DECIDED",
    hitl_expired: "HITL_EXPIRED",
    hitl_not_found: "HITL_NOT_FOUND",
    reservation_not_found: "RESERVATION_NOT_FOUND",
    settlement_conflict: "SETTLEMENT_CONFLICT",
    config_invalid: "CONFIG_INVALID",
    key_not_in_force: "KEY_NOT_IN_FORCE",
    missing_dependency: "MISSING_DEPENDENCY",
    chain_unverified: "CHAIN_UNVERIFIED",
    state_unverified: "STATE_UNVERIFIED",
    denied: "DENIED",
    hitl_required: "HITL_REQUIRED",
  };
  override name = "LeashError";
}

/** Thrown by guard() when the verdict is DENY: the tool did not run. `result` holds the receipt. */
export class LeashDenied extends LeashError {
  static override readonly marker = Symbol.for("leash.engine.LeashDenied");
  override name = "LeashDenied";
  readonly verdict: Verdict = "DENY";
  readonly reason: Reason | EngineReason;
  readonly sessionId: string;
  readonly callNumber: number;
  constructor(readonly result: EvaluateResult) {
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
  readonly verdict: Verdict = "HITL";
  readonly reason: Reason | EngineReason;
  readonly sessionId: string;
  readonly callNumber: number;
  constructor(readonly result: EvaluateResult) {
    super("hitl_required", `Leash needs a human decision (${result.reason}); the tool did not run`);
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
  static override readonly marker = Symbol.for("leash.engine.LeashAlreadyDecided");
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
      "hitl_already_decided",
      `request ${request.request_id} (call ${request.call_number}) of session ${request.session_id} was already ${answer}`,
    );
    this.requestId = request.request_id;
    this.sessionId = request.session_id;
    this.callNumber = request.call_number;
    this.decision = request.decision;
    this.operatorId = request.operator_id;
  }
}

/**
 * Thrown when an answer comes for a request whose time ran out (its expiry is recorded with operator
 * "system:timeout"): the agent has been, or will be, told DENY hitl_timeout. Nothing else was recorded.
 */
export class LeashHitlExpired extends LeashError {
  static override readonly marker = Symbol.for("leash.engine.LeashHitlExpired");
  override name = "LeashHitlExpired";
  readonly requestId: string;
  readonly sessionId: string;
  readonly callNumber: number;
  readonly expiresNs: number | null;
  constructor(request: HitlRequest) {
    super(
      "hitl_expired",
      `request ${request.request_id} (call ${request.call_number}) of session ${request.session_id} expired unanswered`,
    );
    this.requestId = request.request_id;
    this.sessionId = request.session_id;
    this.callNumber = request.call_number;
    this.expiresNs = request.expires_ns;
  }
}
