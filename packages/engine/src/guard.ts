// guard(engine, options, tool): wraps an async tool so Leash decides before it runs and settles after.
// It never runs the tool on DENY or HITL; it throws LeashDenied / LeashHitl with the verdict's reason.
import { randomUUID } from "node:crypto";
import type { Engine } from "./engine.js";
import { LeashDenied, LeashHitl } from "./errors.js";
import type { EvaluateResult } from "./types.js";

export interface GuardOptions<Args extends unknown[], Result> {
  session_id: string;
  /** The tool's name as Leash sees it (repeat limits and windows count per tool name). */
  tool_name: string;
  /** The call's params for the digest and the opaque-context rule. Default: the first argument, or {}. */
  params?: (...args: Args) => Record<string, unknown>;
  /**
   * The estimated cost checked against the budget before the call (a number or exact decimal text).
   * Default: none, so the session's `default_estimate_usd` / `tool_estimates_usd` apply; under a
   * budget without either the call is denied (`policy_violation:missing_estimate`).
   */
  estimate?: number | string | ((...args: Args) => number | string);
  /** The actual cost after the call. Default: the estimate the call was held at. */
  cost?: (result: Result, ...args: Args) => number | string;
  /** The actual cost when the tool throws. Default 0. */
  costOnError?: number;
  /** A fresh replay token per dispatch. Default crypto.randomUUID. */
  nonce?: () => string | number;
  /** Called with every verdict (and its receipt) before the tool runs or the error is thrown. */
  onDecision?: (result: EvaluateResult) => void;
}

export function guard<Args extends unknown[], Result>(
  engine: Engine,
  options: GuardOptions<Args, Result>,
  tool: (...args: Args) => Promise<Result>,
): (...args: Args) => Promise<Result> {
  return async (...args: Args) => {
    const params = options.params ? options.params(...args) : ((args[0] ?? {}) as Record<string, unknown>);
    const estimate = typeof options.estimate === "function" ? options.estimate(...args) : options.estimate;
    const verdict = await engine.evaluate({
      session_id: options.session_id,
      tool_name: options.tool_name,
      params,
      nonce: (options.nonce ?? randomUUID)(),
      ...(estimate === undefined ? {} : { estimated_cost_usd: estimate }),
    });
    options.onDecision?.(verdict);
    if (verdict.verdict === "DENY") throw new LeashDenied(verdict);
    if (verdict.verdict === "HITL") throw new LeashHitl(verdict);
    const settle = (actual: number | string) =>
      engine.postExec({
        session_id: options.session_id,
        call_number: verdict.call_number,
        actual_cost_usd: actual,
      });
    let result: Result;
    try {
      result = await tool(...args);
    } catch (error) {
      await settle(options.costOnError ?? 0);
      throw error;
    }
    await settle(options.cost ? options.cost(result, ...args) : (verdict.estimate_usd ?? 0));
    return result;
  };
}
