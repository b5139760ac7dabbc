// feedback(): the pure state transition after a verdict (spec §5.3), the other half of decide().
// It never decides anything: the verdict comes in, the next State goes out.
import { canonicalHash, canonicalizationError } from "../canonical/index.js";
import type { Call, Config, Decision, State } from "../types.js";
import { afterAllow } from "./after-allow.js";
import { afterDeny } from "./after-deny.js";
import { afterHitl } from "./after-hitl.js";
import type { FeedbackInputs } from "./inputs.js";

export type { FeedbackInputs } from "./inputs.js";
export { recordHumanDecision, resetCircuit } from "./operator.js";
export { afterPostExec, type PostExecInput } from "./post-exec.js";

/** The argument digest when the params can be canonicalized, else null. */
export function paramsDigest(params: unknown): string | null {
  const value = params === undefined || params === null ? {} : params;
  return canonicalizationError(value) === null ? canonicalHash(value) : null;
}

/** The next state after `decision` on `call`; never mutates `state`. */
export function feedback(
  config: Config,
  state: State,
  call: Call,
  decision: Decision,
  inputs: FeedbackInputs,
): State {
  switch (decision.verdict) {
    case "ALLOW": {
      const paramsHash = inputs.paramsHash !== undefined ? inputs.paramsHash : paramsDigest(call.params);
      return afterAllow(config, state, call, { ...inputs, paramsHash });
    }
    case "DENY":
      return afterDeny(state, decision.reason, inputs.nowNs);
    case "HITL": {
      const paramsHash = inputs.paramsHash !== undefined ? inputs.paramsHash : paramsDigest(call.params);
      return afterHitl(state, call, decision.reason, paramsHash);
    }
  }
}
