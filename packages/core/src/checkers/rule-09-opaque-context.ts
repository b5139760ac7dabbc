// Rule 9: a context-bearing key whose value is a non-evaluable marker fails closed to a human.
// The rule is key class × value class; containers are walked into, never opaque themselves.
import { hitl } from "../decision.js";
import type { Decision } from "../types.js";
import { isPythonSpace, isRecord, norm } from "../util/values.js";
import type { DecideContext } from "./context.js";

const OPAQUE = hitl("fail_closed:opaque_context");
const CONTEXT_KEYS: ReadonlySet<string> = new Set(["ctx", "context", "opaque", "raw_context", "blob"]);
const MARKERS: ReadonlySet<string> = new Set(["opaque", "unknown", "unevaluable", "untestable"]);
const MAX_DEPTH = 64;

/**
 * Cheap pre-filter first: every marker starts with "o" or "u" once stripped (Python's whitespace:
 * the reference's `.strip()`, see norm), and only O and U lowercase to those.
 */
function isMarker(v: string): boolean {
  if (MARKERS.has(v)) return true;
  let i = 0;
  let c = v.charCodeAt(0);
  // Printable ASCII, the common first character, is never whitespace: skip the call.
  while ((c <= 0x20 || c >= 0x85) && i < v.length && isPythonSpace(c)) c = v.charCodeAt(++i);
  const first = c | 0x20;
  return (first === 0x6f || first === 0x75) && MARKERS.has(norm(v));
}

function opaqueIn(value: unknown, depth: number): boolean {
  if (depth > MAX_DEPTH) return false;
  if (Array.isArray(value)) {
    for (const item of value)
      if (typeof item === "object" && item !== null && opaqueIn(item, depth + 1)) return true;
    return false;
  }
  if (!isRecord(value)) return false;
  for (const key in value) {
    const v = value[key];
    if (typeof v === "string") {
      if (isMarker(v) && CONTEXT_KEYS.has(norm(key))) return true;
    } else if (typeof v === "object" && v !== null && opaqueIn(v, depth + 1)) {
      return true;
    }
  }
  return false;
}

export function checkOpaqueContext(ctx: DecideContext): Decision | null {
  return opaqueIn(ctx.params, 1) ? OPAQUE : null;
}
