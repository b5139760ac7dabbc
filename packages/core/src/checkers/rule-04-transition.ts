// Rule 4 (spec §3.6): a human decision releases exactly one (nonce, args digest) pair, once.
// It returns unconditionally when a transition is pending; it never records consumption (feedback does).
import { CANONICAL_MAX_DEPTH } from "../canonical/check.js";
import { withCanonicalBytes } from "../canonical/writer.js";
import { allow, deny, hitl } from "../decision.js";
import { TERMINAL_STATUSES } from "../reasons.js";
import type { Decision } from "../types.js";
import { nonEmpty, norm, present, sameNonce } from "../util/values.js";
import type { DecideContext } from "./context.js";
import { bytesHasher } from "./params-digest.js";

const UNKNOWN = deny("hitl_transition:unknown_decision");
const RESUME = deny("policy_violation:duplicate_resume_no_effect");
const REJECT = deny("hitl_transition:reject");
const DEFER = hitl("hitl_transition:defer_escalate");
const SUPERSEDED = deny("hitl_transition:superseded_original");
const TERMINAL = deny("hitl_transition:terminal_no_effect");
const UNBOUND = deny("hitl_transition:unbound_authorization");
const NONCE_MISMATCH = deny("hitl_transition:nonce_mismatch");
const DIGEST_MISMATCH = deny("hitl_transition:digest_mismatch");
const APPROVE = allow("hitl_transition:approve");
const MODIFY = allow("hitl_transition:modify_successor");

const NUMBER_TEXT = { maxDepth: CANONICAL_MAX_DEPTH, numberText: true } as const;

/** Rule 1 has computed it whenever an approval or a modification is pending; this is the fallback. */
function digestOf(ctx: DecideContext): string {
  return ctx.paramsDigest ?? withCanonicalBytes(ctx.params, NUMBER_TEXT, bytesHasher(ctx.inputs));
}

/** An empty string binds nothing, like an absent field. */
const bound = (value: unknown) => present(value) && value !== "";

export function checkTransition(ctx: DecideContext): Decision | null {
  const pending = ctx.state.pending_transition;
  if (!nonEmpty(pending)) return null;

  const decision = norm(pending.decision);
  const terminal = TERMINAL_STATUSES.has(norm(pending.terminal_status));
  let authNonce: unknown;
  let authDigest: unknown;
  let released: Decision;

  switch (decision) {
    case "approve":
    case "reject":
    case "modify":
    case "defer":
    case "escalate":
      break;
    default:
      return UNKNOWN;
  }
  if (terminal && pending.resume_attempt === true) return RESUME;
  if (decision === "reject") return REJECT;
  if (decision === "defer" || decision === "escalate") return DEFER;

  if (decision === "modify") {
    // The superseded original can never run again, whatever its status says.
    if (bound(pending.original_nonce) && sameNonce(ctx.call.nonce, pending.original_nonce)) return SUPERSEDED;
    authNonce = pending.successor_nonce;
    authDigest = pending.successor_args_digest;
    released = MODIFY;
  } else {
    if (terminal) return TERMINAL;
    authNonce = pending.original_nonce;
    authDigest = pending.original_args_digest;
    released = APPROVE;
  }

  const nonceBound = bound(authNonce);
  const digestBound = bound(authDigest);
  if (!nonceBound && !digestBound) return UNBOUND;
  if (nonceBound && !sameNonce(ctx.call.nonce, authNonce)) return NONCE_MISMATCH;
  // The digest is computed only here: it is the one rule that needs canonical JSON + SHA-256 (rule 1
  // has usually built the text already, see rule-01-canonicalizable.ts).
  if (digestBound && (typeof authDigest !== "string" || digestOf(ctx) !== norm(authDigest))) {
    return DIGEST_MISMATCH;
  }
  return released;
}
