// Rule 3: a nonce already seen is a replay; against a terminal transition it is a no-effect resume.
// Only arrays of seen nonces are read; a null or absent nonce skips the rule (docs/architecture.md §4).
import { deny } from "../decision.js";
import { TERMINAL_STATUSES } from "../reasons.js";
import { nonEmpty, norm, present } from "../util/values.js";
import type { DecideContext } from "./context.js";

const DUPLICATE = deny("policy_violation:duplicate_nonce");
const RESUME = deny("policy_violation:duplicate_resume_no_effect");

export function checkReplay(ctx: DecideContext) {
  const nonce = ctx.call.nonce;
  if (!present(nonce)) return null;
  const seen = ctx.state.seen_nonces;
  if (!Array.isArray(seen) || seen.length === 0 || !seen.includes(nonce)) return null;
  const pending = ctx.state.pending_transition;
  if (nonEmpty(pending) && TERMINAL_STATUSES.has(norm(pending.terminal_status))) return RESUME;
  return DUPLICATE;
}
