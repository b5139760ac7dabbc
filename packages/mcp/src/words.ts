// What the model reads when Leash stops a call: the verdict and reason in plain words, and what to do next.
// Wording only; which verdict a call gets is the engine's (or the daemon's) decision.

interface Explanation {
  /** Why, in words (the reason code follows in brackets). */
  why: string;
  /** What the model should do instead. */
  next: string;
}

const STOP = "Do not retry this call; tell the user what happened.";

const EXPLANATIONS: Record<string, Explanation> = {
  max_repeat_exceeded: {
    why: "the same call was repeated too many times in a row",
    next: "Do not repeat it again: change the approach, use another tool, or ask the user.",
  },
  error_amplified_repeat: {
    why: "the same call keeps failing with the same error",
    next: "Do not retry it: the error will not go away by repeating the call. Fix its cause or ask the user.",
  },
  circuit_open: {
    why: "an earlier call was denied, so Leash has stopped every tool call of this session",
    next: "Stop calling tools and tell the user; an operator must reset the session (leash session reset).",
  },
  budget_exhausted: {
    why: "the session's budget is spent",
    next: "Stop using paid tools; finish with what you have and tell the user.",
  },
  budget_overrun: {
    why: "this call would cost more than the budget has left",
    next: "Use a cheaper call, or finish with what you have and tell the user.",
  },
  probabilistic_deny: {
    why: "the budget is nearly spent",
    next: "Use fewer or cheaper calls, or finish with what you have.",
  },
  window_exceeded: {
    why: "too many calls of this tool in a short time",
    next: "Wait before calling it again, or do without it.",
  },
  global_limit: { why: "the session has made as many tool calls as it may", next: STOP },
  timeout: { why: "the session's time limit has passed", next: STOP },
  "hitl_transition:reject": { why: "a human reviewed this call and rejected it", next: STOP },
  "hitl_transition:timeout": { why: "nobody approved this call in time", next: STOP },
  hitl_timeout: { why: "nobody approved this call in time", next: STOP },
  "policy_violation:missing_estimate": {
    why: "the call has no cost estimate, and the session has a budget",
    next: "This is a configuration problem of the proxy (tools.<name>.estimate_usd); tell the user.",
  },
  "policy_violation:tool_denied": {
    why: "this tool is not allowed in this session (the guard's denied_tools)",
    next: "Do not call this tool again; use another one or ask the user. Other tools still work.",
  },
  "policy_violation:params_too_large": {
    why: "the arguments are larger than the session allows (the guard's max_params_bytes)",
    next: "Call the tool again with smaller arguments (pass a reference instead of the content).",
  },
};

function explain(reason: string): Explanation {
  const known = EXPLANATIONS[reason];
  if (known !== undefined) return known;
  if (reason.startsWith("fail_closed:"))
    return {
      why: "Leash could not decide safely, so it refused",
      next: "Try again later, or tell the user.",
    };
  if (reason.startsWith("hitl_transition:"))
    return { why: "the human approval on record does not cover this exact call", next: STOP };
  if (reason.startsWith("policy_violation:"))
    return { why: "the call breaks the session's policy", next: STOP };
  return { why: "the session's policy does not allow it", next: STOP };
}

/** The text of a DENY result: verdict, reason and the advice, on one line. */
export function denialText(tool: string, reason: string, detail?: string): string {
  const { why, next } = explain(reason);
  const more = detail === undefined || detail === "" ? "" : ` (${detail})`;
  return `Leash denied the call to "${tool}": ${why} [reason: ${reason}]${more}. The tool did not run. ${next}`;
}

/** The text of a HITL result: the call waits for a human; how an operator answers it. */
export function pendingText(
  tool: string,
  reason: string,
  pending: {
    sessionId: string;
    requestId: string | null;
    waited: boolean;
    /** Where the operator answers: the engine's store (library) or the daemon (its console). */
    mode?: "library" | "daemon";
  },
): string {
  const id = pending.requestId === null ? "" : ` Request ${pending.requestId} is pending.`;
  const waited = pending.waited ? " Nobody answered it in time." : "";
  const how =
    pending.requestId === null
      ? `An operator answers it on the Leash daemon (session ${pending.sessionId}).`
      : pending.mode === "daemon"
        ? `An operator answers it on the Leash daemon: in its web console, or with leash hitl approve ${pending.requestId} --console URL.`
        : `An operator answers it with: leash hitl approve ${pending.requestId} --operator NAME.`;
  return `Leash paused the call to "${tool}": a human must approve it first [reason: ${reason}].${id}${waited} The tool did not run. ${how} Tell the user; once it is approved, make exactly the same call again.`;
}
