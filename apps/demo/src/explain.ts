// Plain words for what the demo shows: a guard config as sentences, a reason code as an explanation,
// and a chain's entries by kind. Wording only; the rules themselves are @leash/core's decide().
import type { Config } from "@leash/core";

const usd = (n: number | string) => `$${Number(n).toFixed(2)}`;

/** What a guard config allows, one sentence per setting the demo's agents use. */
export function describeConfig(config: Config): string[] {
  const lines: string[] = [];
  if (typeof config.budget_usd === "number" && config.budget_usd > 0) {
    lines.push(
      `may spend up to ${usd(config.budget_usd)}; each call holds its estimated cost until it reports what it spent`,
    );
  } else {
    lines.push("has no budget: cost is not checked");
  }
  if (typeof config.max_repeat_calls === "number" && config.max_repeat_calls > 0) {
    lines.push(
      `may repeat the same call (same tool, same arguments) ${config.max_repeat_calls} times in a row`,
    );
  }
  if (config.error_amplification === true) {
    lines.push(
      "after calls that fail, the repeat limit tightens (error amplification): a failing retry loop is cut short",
    );
  }
  if (config.hitl_mode === "on_threshold" && typeof config.hitl_budget_threshold === "number") {
    lines.push(
      `once less than ${Math.round(config.hitl_budget_threshold * 100)} % of the budget is left, each call waits for a human`,
    );
  } else if (config.hitl_mode === "always") {
    lines.push("every call waits for a human");
  } else if (config.hitl_mode === "on_deny") {
    lines.push("a call that would be denied goes to a human instead");
  }
  if (typeof config.max_total_calls === "number" && config.max_total_calls > 0) {
    lines.push(`may make ${config.max_total_calls} calls in all`);
  }
  if (typeof config.window_max_calls === "number" && typeof config.window_duration_s === "number") {
    lines.push(`may call each tool ${config.window_max_calls} times per ${config.window_duration_s} s`);
  }
  lines.push("every call carries a fresh nonce; a nonce seen before is a replay and is refused");
  return lines;
}

const REASONS: Readonly<Record<string, string>> = {
  within_thresholds: "every check passed: the call may run",
  circuit_open:
    "an earlier DENY tripped this session's circuit: every call is refused until an operator resets it",
  budget_exhausted: "nothing is left of the budget",
  budget_overrun: "the call's estimated cost is more than what is left of the budget",
  max_repeat_exceeded:
    "the same tool with the same arguments, more times in a row than max_repeat_calls allows",
  error_amplified_repeat:
    "the same call again after failures: errors tighten the repeat limit, so a retry loop stops before max_repeat_calls",
  "policy_violation:malformed_input": "the call's tool name, arguments or nonce cannot be read",
  "policy_violation:duplicate_nonce":
    "this nonce was used before: a replayed call is refused, whatever it carries",
  "policy_violation:duplicate_resume_no_effect":
    "the human's answer was already used: sending it again does nothing",
  "policy_violation:missing_estimate": "a call under a budget must say what it will cost",
  "policy_violation:invalid_estimate": "the call's estimated cost is not a non-negative number",
  "policy_violation:params_hash_mismatch": "the agent and Leash disagree on the arguments' digest",
  "policy_violation:tool_denied": "the guard config lists this tool in denied_tools: it never runs",
  "hitl_transition:approve":
    "a human approved exactly this paused call (same nonce, same arguments): it may run, once",
  "hitl_transition:modify_successor":
    "a human allowed an edited version of the paused call: that one may run",
  "hitl_transition:reject": "a human rejected the paused call",
  "hitl_transition:superseded_original":
    "a human replaced this call with an edited one: the original may not run",
  "hitl_transition:terminal_no_effect": "the human's decision on this call is final already",
  "hitl_transition:nonce_mismatch": "an approval is bound to the paused call's nonce: this is another call",
  "hitl_transition:digest_mismatch": "an approval is bound to the paused call's arguments: these differ",
  "hitl_transition:unbound_authorization": "an approval that names no call authorizes nothing",
  "hitl_transition:unknown_decision": "the human's answer is not one Leash knows",
  "hitl_transition:defer_escalate": "the human deferred or escalated: the call waits for another answer",
  "hitl_transition:tool_mismatch": "an approval is for the paused tool only: this is another tool",
  hitl_all_calls: "the guard config asks a human before every call",
  budget_threshold: "less of the budget is left than the review threshold: the call waits for a human",
  "fail_closed:opaque_context": "Leash could not read the session's state: it refuses rather than guesses",
  "fail_closed:chain_unverified":
    "the store's audit chain does not verify: nothing is decided until it is repaired",
  timeout: "the session is older than timeout_seconds",
  global_limit: "the session has made max_total_calls calls",
  window_exceeded: "too many calls of this tool within the time window",
  probabilistic_deny: "the budget is low, and Leash denies at random, more often as it runs out",
};

/** A reason code in plain words; `hitl_on_deny:X` is X, sent to a human instead of denied. */
export function explainReason(reason: string): string {
  const known = REASONS[reason];
  if (known !== undefined) return known;
  if (reason.startsWith("hitl_on_deny:")) {
    return `would be denied (${explainReason(reason.slice("hitl_on_deny:".length))}), so a human decides`;
  }
  return "see the README's list of reasons";
}

/** Entry kinds: a short name for counts (one, many), and what one entry records. */
const KINDS: Readonly<Record<string, readonly [one: string, many: string, long: string]>> = {
  decision: ["verdict", "verdicts", "a verdict: one per evaluated call, allowed or not"],
  session_registered: [
    "session registration",
    "session registrations",
    "a session registered, with its guard config",
  ],
  post_exec: ["settled cost", "settled costs", "a settled cost: the tool ran and reported what it spent"],
  hitl_request: [
    "request for a human",
    "requests for a human",
    "a paused call's request, announced to operators (relay, console)",
  ],
  hitl_decision: ["human answer", "human answers", "a human's answer to a paused call"],
  hitl_expired: ["expired request", "expired requests", "a request for a human that nobody answered in time"],
  reservation_expired: [
    "expired hold",
    "expired holds",
    "a budget hold released after its agent never reported (older chains)",
  ],
  settled_by_expiry: [
    "hold charged on expiry",
    "holds charged on expiry",
    "an allowed call's hold kept spent at its estimate after its agent never reported",
  ],
  circuit_reset: ["reset", "resets", "an operator's reset of a tripped circuit"],
  key_rotation: ["key rotation", "key rotations", "a signing-key rotation"],
};

export const describeKind = (kind: string): string => KINDS[kind]?.[2] ?? kind;

/** Entries by kind, in the order the table shows them (decisions first). */
export function countKinds(kinds: readonly string[]): Array<[kind: string, count: number]> {
  const counts = new Map<string, number>();
  for (const kind of kinds) counts.set(kind, (counts.get(kind) ?? 0) + 1);
  const order = Object.keys(KINDS);
  return [...counts].sort(
    ([a], [b]) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99) || a.localeCompare(b),
  );
}

/** Why N decisions make M entries, in one sentence. */
export function entriesSentence(kinds: readonly string[]): string {
  const counts = countKinds(kinds);
  const decisions = counts.find(([k]) => k === "decision")?.[1] ?? 0;
  const parts = counts.map(([kind, n]) => `${n} ${KINDS[kind]?.[n === 1 ? 0 : 1] ?? kind}`);
  return `${decisions} decisions make ${kinds.length} entries because every change of state is signed into the chain, not only verdicts: ${parts.join(", ")}.`;
}
