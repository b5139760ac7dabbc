// decide(config, state, call, inputs?): the SP/1.0 decision function — the 10 ordered rules of §3.2.
// Pure and total: no I/O, no clock, no randomness, never throws; state changes belong to feedback/.
import type { DecideContext } from "./checkers/context.js";
import { checkCanonicalizable } from "./checkers/rule-01-canonicalizable.js";
import { checkCircuit } from "./checkers/rule-02-circuit.js";
import { checkReplay } from "./checkers/rule-03-replay.js";
import { checkTransition } from "./checkers/rule-04-transition.js";
import { checkBudgetExhausted } from "./checkers/rule-05-budget-exhausted.js";
import { checkBudgetOverrun } from "./checkers/rule-05b-budget-overrun.js";
import { checkRepeat } from "./checkers/rule-06-repeat.js";
import { checkHitlAlways } from "./checkers/rule-07-hitl-always.js";
import { checkHitlThreshold } from "./checkers/rule-08-hitl-threshold.js";
import { checkOpaqueContext } from "./checkers/rule-09-opaque-context.js";
import { allow, deny } from "./decision.js";
import { checkExtensions } from "./extensions/index.js";
import type { DecideInputs, Decision } from "./types.js";
import { isRecord, rec } from "./util/values.js";

const MALFORMED = deny("policy_violation:malformed_input");
const WITHIN = allow("within_thresholds");
const NO_INPUTS: DecideInputs = Object.freeze({});

/**
 * Decides one proposed call. `config`, `state` and `call` may be any values (P1): a missing or
 * non-object config or state reads as all-defaults; a call that is not an object, or whose
 * `params` is neither an object nor missing/null, is malformed. Any exception while reading
 * hostile input (a throwing getter, a revoked proxy) is a malformed-input DENY: fail closed.
 */
export function decide(config: unknown, state: unknown, call: unknown, inputs?: DecideInputs): Decision {
  try {
    if (!isRecord(call)) return MALFORMED;
    const rawParams = call.params;
    const ctx: DecideContext = {
      config: rec(config),
      state: rec(state),
      call,
      params: rawParams === undefined || rawParams === null ? {} : rawParams,
      inputs: inputs ?? NO_INPUTS,
      paramsDigest: null,
    };
    return (
      checkCanonicalizable(ctx) ??
      checkCircuit(ctx) ??
      checkReplay(ctx) ??
      checkTransition(ctx) ??
      checkBudgetExhausted(ctx) ??
      checkBudgetOverrun(ctx) ??
      checkRepeat(ctx) ??
      checkExtensions(ctx) ??
      checkHitlAlways(ctx) ??
      checkHitlThreshold(ctx) ??
      checkOpaqueContext(ctx) ??
      WITHIN
    );
  } catch {
    return MALFORMED;
  }
}
