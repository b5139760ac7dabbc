// guard(client, options, tool): the engine's guard() over the daemon — same options, same errors.
// DENY throws before the tool runs; HITL waits for the human (then the daemon judges the re-dispatch); ALLOW runs it, then settles.
import { getRandomValues } from "node:crypto";
import type { Client } from "./client.js";
import { LeashDenied, LeashHitl } from "./errors.js";
import type { HitlOutcome, PreExecResult } from "./types.js";

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
  /**
   * On HITL, wait for a human (default true): up to the request's expiry, then re-dispatch the
   * approved call, or throw LeashDenied with the reason. false: throw LeashHitl at once.
   */
  wait?: boolean;
  /** Called once the call paused, with the verdict (its `hitl_request_id` is what an operator answers). */
  onHitl?: (paused: PreExecResult) => void;
  /**
   * For modify: the tool's arguments carrying the operator's params. Default: the params replace
   * the first argument (the default `params` reads them from there).
   */
  withParams?: (params: Record<string, unknown>, ...args: Args) => Args;
}

/** A random safe integer ≥ 1: the dispatch's nonce, kept so an approval's re-dispatch can send it again. */
function randomNonce(): number {
  const [hi = 0, lo = 0] = getRandomValues(new Uint32Array(2));
  return (hi & 0x1fffff) * 2 ** 32 + lo + 1;
}

function deniedBy(outcome: HitlOutcome, last: PreExecResult): LeashDenied {
  return new LeashDenied({
    ...last,
    verdict: "DENY",
    reason: outcome.reason,
    fail_closed: outcome.kind === "fail_closed",
    ...(outcome.detail === undefined ? {} : { detail: outcome.detail }),
  });
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
    const dispatch = (callParams: Record<string, unknown> | string, nonce: string | number) =>
      client.preExec({
        session_id: options.session_id,
        tool_name: options.tool_name,
        params: callParams,
        estimated_cost_usd: estimate,
        nonce,
      });
    const nonce = (options.nonce ?? randomNonce)();
    let verdict = await dispatch(params, nonce);
    options.onDecision?.(verdict);
    let toolArgs = args;
    if (verdict.verdict === "HITL" && options.wait !== false && verdict.hitl_request_id) {
      options.onHitl?.(verdict);
      const outcome = await client.waitForHitl(verdict.hitl_request_id, {
        session_id: options.session_id,
        expires_ns: verdict.hitl_expires_ns ?? null,
      });
      // The daemon judges the re-dispatch (spec §3.6 rule 4), as the engine's guard() does: approve,
      // reject and expiry → the same call and nonce (ALLOW once, or a recorded DENY); modify → the
      // successor the operator allowed (its nonce, its params). Defer and escalate run nothing now.
      if (outcome.kind === "fail_closed") throw deniedBy(outcome, verdict);
      if (outcome.decision === "modify" && outcome.successor !== undefined) {
        const modified = JSON.parse(outcome.successor.params_json) as Record<string, unknown>;
        toolArgs = options.withParams
          ? options.withParams(modified, ...args)
          : ([modified, ...args.slice(1)] as unknown as Args);
        verdict = await dispatch(outcome.successor.params_json, outcome.successor.nonce);
        options.onDecision?.(verdict);
      } else if (
        outcome.kind === "expired" ||
        outcome.decision === "approve" ||
        outcome.decision === "reject"
      ) {
        const again = await dispatch(params, nonce);
        options.onDecision?.(again);
        // An expired request never runs the tool, whatever the re-dispatch answers.
        if (outcome.kind === "expired" && again.verdict !== "DENY") throw deniedBy(outcome, again);
        verdict = again;
      } else {
        throw deniedBy({ ...outcome, reason: "hitl_transition:defer_escalate" }, verdict);
      }
    }
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
      result = await tool(...toolArgs);
    } catch (error) {
      await settle(options.costOnError ?? 0);
      throw error;
    }
    await settle(options.cost ? options.cost(result, ...toolArgs) : estimate);
    return result;
  };
}
