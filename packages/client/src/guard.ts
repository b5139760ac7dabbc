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
   * On HITL, wait for the human's answer up to the request's expiry (default true). false: throw
   * LeashHitl at once, as before.
   */
  waitForHitl?: boolean;
  /** Told of each human answer (or expiry) before the call is re-dispatched. */
  onHitl?: (outcome: HitlOutcome) => void;
  /**
   * The tool's arguments for params an operator modified. Default: the params as the first
   * argument, the other arguments unchanged.
   */
  withParams?: (params: Record<string, unknown>, ...args: Args) => Args;
  /** How many defer/escalate answers in a row to wait through before giving up (DENY). Default 5. */
  maxHitlRounds?: number;
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
    const rounds = options.maxHitlRounds ?? 5;
    for (let round = 0; verdict.verdict === "HITL" && options.waitForHitl !== false; round++) {
      if (round >= rounds || !verdict.hitl_request_id) break;
      const outcome = await client.waitForHitl(verdict.hitl_request_id, {
        session_id: options.session_id,
        expires_ns: verdict.hitl_expires_ns ?? null,
      });
      options.onHitl?.(outcome);
      if (outcome.kind === "expired") {
        // The daemon records the expiry; the re-dispatch gets its signed DENY hitl_timeout. Whatever
        // it answers, an expired request never runs the tool.
        const last = await dispatch(params, nonce);
        options.onDecision?.(last);
        throw last.verdict === "DENY" ? new LeashDenied(last) : deniedBy(outcome, last);
      }
      if (outcome.kind !== "decided") throw deniedBy(outcome, verdict);
      // The daemon judges the re-dispatch (spec §3.6 rule 4): approve → the same call, same nonce;
      // modify → the successor the operator allowed (its nonce, its params); reject → a recorded DENY;
      // defer/escalate → a new request to wait for.
      if (outcome.decision === "modify" && outcome.successor !== undefined) {
        const modified = JSON.parse(outcome.successor.params_json) as Record<string, unknown>;
        toolArgs = options.withParams
          ? options.withParams(modified, ...args)
          : ([modified, ...args.slice(1)] as unknown as Args);
        verdict = await dispatch(outcome.successor.params_json, outcome.successor.nonce);
      } else {
        verdict = await dispatch(params, nonce);
      }
      options.onDecision?.(verdict);
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
