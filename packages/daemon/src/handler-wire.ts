// What the daemon's handler says on the wire: Appendix B Errors for its failures, SP/1.0 messages for
// the engine's views (guard config, session state). It decides nothing and reads no store.
import { create } from "@bufbuild/protobuf";
import type { Config } from "@leash/core";
import { LeashError, type SessionView } from "@leash/engine";
import {
  BudgetScope,
  ErrorCode,
  type Error as ErrorMessage,
  ErrorSchema,
  errorPayload,
  type GuardConfig,
  GuardConfigSchema,
  HitlMode,
  moneyToWire,
  SessionStateSchema,
  SessionStatus,
  WireError,
} from "@leash/wire";
import { HitlError, type HitlErrorCode } from "./hitl/errors.js";

/** A refusal the handler makes itself, with its Appendix B code and a stable detail. */
export class Refusal extends Error {
  constructor(
    readonly code: ErrorCode,
    readonly detail: string,
    message: string,
  ) {
    super(message);
  }
}

const HITL_ERROR_CODES: Record<HitlErrorCode, ErrorCode> = {
  hitl_request_not_found: ErrorCode.INVALID_MESSAGE,
  hitl_already_decided: ErrorCode.INVALID_MESSAGE,
  hitl_expired: ErrorCode.INVALID_MESSAGE,
  hitl_invalid_decision: ErrorCode.INVALID_MESSAGE,
  hitl_invalid_params: ErrorCode.INVALID_MESSAGE,
  hitl_read_only: ErrorCode.AUTHENTICATION_FAILED,
  hitl_closing: ErrorCode.DAEMON_UNAVAILABLE,
  hitl_cancelled: ErrorCode.DAEMON_UNAVAILABLE,
};

/** A HITL desk refusal as an SP/1.0 Error (the console's WebSocket sends the same). */
export function hitlErrorPayload(error: HitlError): { case: "error"; value: ErrorMessage } {
  return errorOf(HITL_ERROR_CODES[error.code] ?? ErrorCode.INVALID_MESSAGE, error.code, error.message);
}

export function errorOf(
  code: ErrorCode,
  detail: string,
  message: string,
): { case: "error"; value: ErrorMessage } {
  return { case: "error", value: create(ErrorSchema, { code, detail, message }) };
}

/** The budget-guard package's errors carry this marker (bad amounts); they are the caller's input. */
const BUDGET_GUARD_MARKER = Symbol.for("leash.budget-guard.error");

/** The Error payload for a failure: Appendix B by engine code, DAEMON_UNAVAILABLE for anything unexpected. */
export function answerFor(error: unknown): { case: "error"; value: ErrorMessage } | undefined {
  if (error instanceof Refusal) return errorOf(error.code, error.detail, error.message);
  if (HitlError.isInstance(error)) return hitlErrorPayload(error);
  if (WireError.isInstance(error)) return errorPayload(error);
  if (LeashError.isInstance(error)) {
    const message = error.message.split("\n")[0]!;
    switch (error.code) {
      case "session_not_found":
        return errorOf(ErrorCode.SESSION_NOT_FOUND, "session_not_found", message);
      case "session_exists":
        // Another agent's session id: answered as an unknown one, so no id can be probed.
        return errorOf(ErrorCode.SESSION_NOT_FOUND, "session_not_found", "unknown session");
      case "settlement_conflict":
        return errorOf(ErrorCode.INVALID_MESSAGE, "settlement_conflict", message);
      case "reservation_not_found":
        return errorOf(ErrorCode.INVALID_MESSAGE, "reservation_not_found", message);
      case "invalid_argument":
      case "config_invalid":
        return errorOf(ErrorCode.INVALID_MESSAGE, error.code.toLowerCase(), message);
      default:
        return undefined;
    }
  }
  if (typeof error === "object" && error !== null && BUDGET_GUARD_MARKER in error) {
    const code = String((error as { code?: unknown }).code ?? "invalid_amount");
    return errorOf(ErrorCode.INVALID_MESSAGE, code, String((error as { message?: unknown }).message));
  }
  return undefined;
}

const SCOPES: Record<string, BudgetScope> = {
  session: BudgetScope.PER_SESSION,
  agent: BudgetScope.PER_AGENT,
  organization: BudgetScope.PER_ORGANIZATION,
};
const HITL_MODES: Record<string, HitlMode> = {
  never: HitlMode.HITL_NEVER,
  on_deny: HitlMode.HITL_ON_DENY,
  on_threshold: HitlMode.HITL_ON_BUDGET_THRESHOLD,
  always: HitlMode.HITL_ALWAYS,
};

/** The session's guard config as §5.2's GuardConfig (budget as decimal and nearest double). */
export function guardConfigToWire(config: Config): GuardConfig {
  const budget = config.budget_usd === undefined ? undefined : moneyToWire(config.budget_usd);
  return create(GuardConfigSchema, {
    budgetUsd: budget?.double ?? 0,
    budgetUsdDecimal: budget?.decimal ?? "",
    budgetScope: SCOPES[config.budget_scope ?? "session"] ?? BudgetScope.PER_SESSION,
    maxRepeatCalls: config.max_repeat_calls ?? 0,
    errorAmplification: config.error_amplification ?? false,
    timeoutSeconds: config.timeout_seconds ?? 0,
    windowDurationS: config.window_duration_s ?? 0,
    windowMaxCalls: config.window_max_calls ?? 0,
    maxTotalCalls: config.max_total_calls ?? 0,
    probabilisticDeny: config.probabilistic_deny ?? false,
    denyJitterRatio: config.deny_jitter_ratio ?? 0,
    hitlMode: HITL_MODES[config.hitl_mode ?? "never"] ?? HitlMode.HITL_NEVER,
    hitlBudgetThreshold: config.hitl_budget_threshold ?? 0,
    parentGuardId: config.parent_guard_id ?? "",
    deniedTools: [...(config.denied_tools ?? [])],
  });
}

const STATUS: Record<string, SessionStatus> = {
  ACTIVE: SessionStatus.ACTIVE,
  PAUSED: SessionStatus.PAUSED,
  TERMINATED: SessionStatus.TERMINATED,
  STALE: SessionStatus.STALE,
};

export const money = (amount: string | number | null | undefined) =>
  amount === null || amount === undefined ? { double: 0, decimal: "" } : moneyToWire(amount);

export const toNs = (value: number | null | undefined): bigint =>
  value === null || value === undefined ? 0n : BigInt(Math.trunc(value));

/** A uint64 call number the engine can take (it counts in safe integers). */
export function callNumberOf(value: bigint, field: string): number {
  if (value < 1n || value > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new Refusal(ErrorCode.INVALID_MESSAGE, "invalid_call_number", `${field} must be in [1, 2^53 - 1]`);
  }
  return Number(value);
}

export function requireSessionId(sessionId: string): void {
  if (sessionId === "")
    throw new Refusal(ErrorCode.INVALID_MESSAGE, "missing_session_id", "session_id is required");
}

export function sessionStateOf(view: SessionView) {
  const s = view.state;
  const initial = view.config.budget_usd;
  const remaining = view.budget_remaining_usd;
  const spent = s.budget_spent_usd;
  const b0 = money(initial);
  const b1 = money(remaining);
  const b2 = initial === undefined ? { double: 0, decimal: "" } : money(spent ?? 0);
  const counts = (r: Record<string, number> | undefined) =>
    Object.fromEntries(Object.entries(r ?? {}).map(([k, v]) => [k, Math.max(0, Math.trunc(v))]));
  return create(SessionStateSchema, {
    sessionId: view.session_id,
    agentId: view.agent_id,
    organizationId: view.organization_id,
    status: STATUS[view.status] ?? SessionStatus.ACTIVE,
    budgetInitialUsd: b0.double,
    budgetInitialUsdDecimal: b0.decimal,
    budgetRemainingUsd: b1.double,
    budgetRemainingUsdDecimal: b1.decimal,
    budgetSpentUsd: b2.double,
    budgetSpentUsdDecimal: b2.decimal,
    totalCalls: BigInt(view.call_count),
    repeatCounts: counts(s.repeat_counts),
    windowCounts: counts(s.window_counts),
    circuitTripped: s.circuit_tripped ?? false,
    circuitTripReason: s.circuit_trip_reason ?? "",
    circuitTrippedAtNs: toNs(s.circuit_tripped_at_ns),
    windowStartNs: toNs(s.window_start_ns),
    windowDurationS: view.config.window_duration_s ?? 0,
    windowMaxCalls: view.config.window_max_calls ?? 0,
    lastToolName: s.last_tool_name ?? "",
    lastToolParamsHash:
      typeof s.last_tool_params_hash === "string" && /^[0-9a-f]{64}$/.test(s.last_tool_params_hash)
        ? Uint8Array.from(Buffer.from(s.last_tool_params_hash, "hex"))
        : new Uint8Array(0),
    lastActivityNs: toNs(s.last_activity_ns),
  });
}

/** The daemon's HITL timeout fills in for a policy that names none; a policy's own always wins. */
export function withHitlTimeout(policy: Config, seconds: number | undefined): Config {
  return seconds === undefined || policy.hitl_timeout_s !== undefined
    ? policy
    : { ...policy, hitl_timeout_s: seconds };
}
