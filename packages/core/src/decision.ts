// Frozen Decision values, one per reason, so the hot path allocates nothing per verdict.
// Only constructors; the rules that pick them live in checkers/ and extensions/.
import type { Decision, Reason, Verdict } from "./types.js";

const cache = new Map<string, Decision>();

export function verdict(v: Verdict, reason: Reason): Decision {
  const key = `${v} ${reason}`;
  let d = cache.get(key);
  if (d === undefined) {
    d = Object.freeze({ verdict: v, reason });
    cache.set(key, d);
  }
  return d;
}

export const deny = (reason: Reason): Decision => verdict("DENY", reason);
export const hitl = (reason: Reason): Decision => verdict("HITL", reason);
export const allow = (reason: Reason): Decision => verdict("ALLOW", reason);
