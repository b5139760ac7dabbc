// Rule 1 (spec §3.2, §3.8): params that cannot be canonicalized are denied, detected structurally.
// The structural walk itself lives in canonical/; this module only maps it to the verdict.

import { canonicalParamsText } from "../canonical/check-and-serialize.js";
import { canonicalizationError } from "../canonical/index.js";
import { deny } from "../decision.js";
import { isRecord } from "../util/values.js";
import type { DecideContext } from "./context.js";

const MALFORMED = deny("policy_violation:malformed_input");

/**
 * Rule 4 digests the params when a transition is pending: then the check and the serialization are
 * one walk, and the text is kept for it. Otherwise the check builds no string at all.
 */
function digestAhead(ctx: DecideContext): boolean {
  const pending = ctx.state.pending_transition;
  return isRecord(pending) && Object.keys(pending).length > 0;
}

export function checkCanonicalizable(ctx: DecideContext) {
  if (!digestAhead(ctx)) return canonicalizationError(ctx.params) === null ? null : MALFORMED;
  const result = canonicalParamsText(ctx.params);
  if ("error" in result) return MALFORMED;
  ctx.paramsText = result.text;
  return null;
}
