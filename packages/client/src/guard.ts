// guard(client, options, tool): the engine's guard() over the daemon — same options, same errors.
// DENY or HITL (a fail-closed DENY included) throws before the tool runs; ALLOW runs it, then settles.
import type { Client } from "./client.js";
import { LeashDenied, LeashHitl } from "./errors.js";
import type { PreExecResult } from "./types.js";

export interface GuardOptions<Args extends unknown[], Result> {
  session_id: string;
  /** The tool's name as Leash sees it (repeat limits and windows count per tool name). */
  tool_name: string;
  /** The call's params (an object, or JSON text sent as given). Default: the first argument, or {}. */
  params?: (...args: Args) => Record<string, unknown> | string;
  /** The estimated cost checked against the budget before the call. Default 0. */
  estimate?: number | string | ((...args: Args) => number | string);
  /** The actual cost after the call. Default: the estimate. */
  cost?: (result: Result, ...args: Args) => number | string;
  /** The actual cost when the tool throws. Default 0. */
  costOnError?: number | string;
  /** A fresh replay token per dispatch. Default: a random integer (see README "Nonces"). */
  nonce?: () => string | number;
  /** Called with every verdict (and its receipt) before the tool runs or the error is thrown. */
  onDecision?: (result: PreExecResult) => void;
}

export function guard<Args extends unknown[], Result>(
  client: Client,
  options: GuardOptions<Args, Result>,
  tool: (...args: Args) => Promise<Result>,
): (...args: Args) => Promise<Result> {
  return async (...args: Args) => {
    const params = options.params ? options.params(...args) : ((args[0] ?? {}) as Record<string, unknown>);
    const estimate =
      typeof options.estimate === "function" ? options.estimate(...args) : (options.estimate ?? 0);
    const verdict = await client.preExec({
      session_id: options.session_id,
      tool_name: options.tool_name,
      params,
      estimated_cost_usd: estimate,
      ...(options.nonce ? { nonce: options.nonce() } : {}),
    });
    options.onDecision?.(verdict);
    if (verdict.verdict === "DENY") throw new LeashDenied(verdict);
    if (verdict.verdict === "HITL") throw new LeashHitl(verdict);
    const settle = (actual: number | string) =>
      client.postExec({
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
    await settle(options.cost ? options.cost(result, ...args) : estimate);
    return result;
  };
}
