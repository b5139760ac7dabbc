// Rule 1 (spec §3.2, §3.8): params that cannot be canonicalized are denied, detected structurally.
// The structural walk itself lives in canonical/; this module only maps it to the verdict.

import { canonicalParamsDigest } from "../canonical/check-and-serialize.js";
import { canonicalizationError } from "../canonical/index.js";
import { deny } from "../decision.js";
import { nonEmpty, norm } from "../util/values.js";
import type { DecideContext } from "./context.js";
import { bytesHasher } from "./params-digest.js";

const MALFORMED = deny("policy_violation:malformed_input");

/**
 * Rule 4 digests the params when an approval or a modification is pending: then the check and the
 * serialization are one walk, and the bytes are kept for it. Otherwise (a rejection, a deferral, an
 * unknown decision, no transition) the check writes nothing at all.
 */
function digestAhead(ctx: DecideContext): boolean {
  const pending = ctx.state.pending_transition;
  if (!nonEmpty(pending)) return false;
  const decision = norm(pending.decision);
  return decision === "approve" || decision === "modify";
}

export function checkCanonicalizable(ctx: DecideContext) {
  if (!digestAhead(ctx)) return canonicalizationError(ctx.params) === null ? null : MALFORMED;
  const result = canonicalParamsDigest(ctx.params, bytesHasher(ctx.inputs));
  if ("error" in result) return MALFORMED;
  ctx.paramsDigest = result.digest;
  return null;
}
