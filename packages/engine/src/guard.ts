// guard(engine, options, tool): wraps an async tool so Leash decides before it runs and settles after.
// On HITL it waits for the human's answer (or the request's expiry) and re-dispatches; it never runs a tool Leash did not ALLOW.
import { randomUUID } from "node:crypto";
import type { Nonce } from "@leash/core";
import type { Engine } from "./engine.js";
import { LeashDenied, LeashHitl } from "./errors.js";
import type { EvaluateResult, HitlRequestView } from "./types.js";

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
  /**
   * On HITL, wait for a human (default true): up to the request's expiry, then re-dispatch the
   * approved call, or throw LeashDenied with the reason. false: throw LeashHitl at once.
   */
  wait?: boolean;
  /** Called once the call paused, with the request to show (its `request_id` is what an operator answers). */
  onHitl?: (request: HitlRequestView) => void;
  /**
   * For modify: the tool's arguments carrying the operator's params. Default: the params replace
   * the first argument (the default `params` reads them from there).
   */
  withParams?: (params: Record<string, unknown>, ...args: Args) => Args;
  /** Aborting stops a wait for a human (the promise rejects with the signal's reason); nothing runs. */
  signal?: AbortSignal;
}

/** A deferred or escalated answer: the call is not re-dispatched (it would only ask again), and is not run. */
function notNow(paused: EvaluateResult): LeashDenied {
  return new LeashDenied({
    ...paused,
    verdict: "DENY",
    reason: "hitl_transition:defer_escalate",
    receipt: null,
    entry_seq: null,
    entry_hash: null,
  });
}

export function guard<Args extends unknown[], Result>(
  engine: Engine,
  options: GuardOptions<Args, Result>,
  tool: (...args: Args) => Promise<Result>,
): (...args: Args) => Promise<Result> {
  return async (...args: Args) => {
    const params = options.params ? options.params(...args) : ((args[0] ?? {}) as Record<string, unknown>);
    const estimate = typeof options.estimate === "function" ? options.estimate(...args) : options.estimate;
    const dispatch = async (callParams: Record<string, unknown>, nonce: Nonce) => {
      const verdict = await engine.evaluate({
        session_id: options.session_id,
        tool_name: options.tool_name,
        params: callParams,
        nonce,
        ...(estimate === undefined ? {} : { estimated_cost_usd: estimate }),
      });
      options.onDecision?.(verdict);
      return verdict;
    };
    const nonce = (options.nonce ?? randomUUID)();
    let verdict = await dispatch(params, nonce);
    let runArgs = args;
    if (verdict.verdict === "HITL" && options.wait !== false && verdict.hitl_request_id !== undefined) {
      const requestId = verdict.hitl_request_id;
      options.onHitl?.(await engine.getHitl(requestId));
      const answered = await engine.waitForHitl(requestId, options.signal ? { signal: options.signal } : {});
      if (
        answered.status === "expired" ||
        answered.decision === "approve" ||
        answered.decision === "reject"
      ) {
        // The same call again: the engine answers with what the human (or the clock) decided, on record.
        verdict = await dispatch(params, nonce);
      } else if (answered.decision === "modify" && answered.successor !== null) {
        const edited = answered.successor.params ?? params;
        runArgs = options.withParams
          ? options.withParams(edited, ...args)
          : ([edited, ...args.slice(1)] as unknown as Args);
        verdict = await dispatch(edited, answered.successor.nonce);
      } else {
        throw notNow(verdict);
      }
    }
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
      result = await tool(...runArgs);
    } catch (error) {
      await settle(options.costOnError ?? 0);
      throw error;
    }
    await settle(options.cost ? options.cost(result, ...runArgs) : (verdict.estimate_usd ?? 0));
    return result;
  };
}
