// Rule 1 (spec §3.2, §3.8): params that cannot be canonicalized are denied, detected structurally.
// The structural walk itself lives in canonical/; this module only maps it to the verdict.
import { canonicalizationError } from "../canonical/index.js";
import { deny } from "../decision.js";
import type { DecideContext } from "./context.js";

const MALFORMED = deny("policy_violation:malformed_input");

export function checkCanonicalizable(ctx: DecideContext) {
  return canonicalizationError(ctx.params) === null ? null : MALFORMED;
}
