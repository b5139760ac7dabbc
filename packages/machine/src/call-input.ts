// The engine's checks of a library evaluate request beyond decide(): its form (as the wire's schema
// would check it) and, under a budget, the estimate that applies. Verdicts stay decide()'s and the ledger's.
import { type Money, readEstimate } from "@leash/budget-guard";
import type { Config, Verdict } from "@leash/core";
import type { EngineReason } from "./reasons.js";

/** Text longer than this is not recorded as given in the audit entry (its problem is). */
const RECORDED_TEXT_MAX = 100;

/** A lone surrogate: in `u` mode a well-formed pair is one code point, never of category Cs. */
const LONE_SURROGATE = /\p{Cs}/u;

/**
 * Why the request's tool name or nonce cannot be evaluated (or recorded in the chain), or null.
 * decide() checks params itself (rule 1); these fields it takes on trust, so a lone surrogate would
 * only fail later, deep in the chain's canonical JSON, and a NaN nonce would reach the nonce store.
 */
export function malformedInput(request: { tool_name?: unknown; nonce?: unknown }): string | null {
  const tool = request.tool_name;
  if (typeof tool !== "string" || tool === "") return "tool_name must be a non-empty string";
  if (LONE_SURROGATE.test(tool)) return "tool_name is not well-formed text (a lone surrogate)";
  const nonce = request.nonce;
  if (nonce === undefined || nonce === null) return null;
  if (typeof nonce === "number") return Number.isFinite(nonce) ? null : `nonce must be finite, got ${nonce}`;
  if (typeof nonce !== "string") return "nonce must be a string, a number or null";
  if (LONE_SURROGATE.test(nonce)) return "nonce is not well-formed text (a lone surrogate)";
  return null;
}

/** Error text longer than this is recorded (and searched for error signals) only up to here. */
export const ERROR_TEXT_MAX = 1024;

/**
 * The error a caller saw in the tool's previous result (`previous_error`, `error_message`), as the
 * engine records and searches it: text, at most ERROR_TEXT_MAX code units, lone surrogates replaced
 * (the chain's canonical JSON refuses them). Anything but non-empty text is no error report.
 */
export function recordableErrorText(value: unknown): string | undefined {
  if (typeof value !== "string" || value === "") return undefined;
  return value.slice(0, ERROR_TEXT_MAX).replace(/\p{Cs}/gu, "\uFFFD");
}

export type EstimateResolution =
  | {
      ok: true;
      /** The exact hold (see readEstimate); null: beyond the money range, more than any budget. */
      hold: Money | null;
    }
  | { ok: false; reason: EngineReason; problem: string };

/**
 * The estimate a budgeted call is held at: its own `estimated_cost_usd` when given (a bad one is
 * `invalid_estimate`, never replaced by a default), else its tool's `tool_estimates_usd`, else
 * `default_estimate_usd`, else `missing_estimate`. Never 0 by default: an agent that leaves the
 * estimate out must not get a free hold.
 */
export function resolveEstimate(config: Config, toolName: string, given: unknown): EstimateResolution {
  let value: unknown = given;
  let source = "estimated_cost_usd";
  if (given === undefined || given === null) {
    const perTool = config.tool_estimates_usd;
    if (typeof perTool === "object" && perTool !== null && Object.hasOwn(perTool, toolName)) {
      value = perTool[toolName];
      source = `tool_estimates_usd[${JSON.stringify(toolName)}]`;
    } else if (config.default_estimate_usd !== undefined) {
      value = config.default_estimate_usd;
      source = "default_estimate_usd";
    } else {
      return {
        ok: false,
        reason: "policy_violation:missing_estimate",
        problem:
          "a call under a budget needs estimated_cost_usd (or a default_estimate_usd / tool_estimates_usd in its guard config)",
      };
    }
  }
  const reading = readEstimate(value);
  if (reading.ok) return { ok: true, hold: reading.hold };
  return { ok: false, reason: "policy_violation:invalid_estimate", problem: `${source} ${reading.problem}` };
}

/**
 * Whether decide()'s verdict stands over a bad or missing estimate: the DENYs and HITLs of rules 1
 * to 5 (malformed params, open circuit, replay, a human's transition, nothing left) come before the
 * estimate is judged (rule 5b), as they would in decide() itself. Everything else, ALLOWs above
 * all (an ALLOW needs a hold), gives way to the estimate's DENY.
 */
export function outranksEstimate(decision: { verdict: Verdict; reason: string }): boolean {
  if (decision.verdict === "ALLOW") return false;
  switch (decision.reason) {
    case "policy_violation:malformed_input":
    case "circuit_open":
    case "policy_violation:duplicate_nonce":
    case "policy_violation:duplicate_resume_no_effect":
    case "budget_exhausted":
    case "policy_violation:tool_denied": // a tool never run needs no estimate
      return true;
    default:
      return decision.reason.startsWith("hitl_transition:");
  }
}

/** The estimate as the agent gave it, for the audit entry: only what canonical JSON can carry as is. */
export function recordableEstimate(given: unknown): number | string | null {
  if (typeof given === "number") return Number.isFinite(given) ? given : String(given);
  if (typeof given === "string" && given.length <= RECORDED_TEXT_MAX && !LONE_SURROGATE.test(given)) {
    return given;
  }
  return null;
}
