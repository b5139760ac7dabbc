// The error signals of spec §3.9 and a substring search for them in params (no regex: no ReDoS).
// It only answers "does this call carry an error signal"; the guard decides what that means.
import { JsonNumberText, numberTextToCanonical } from "../canonical/number.js";
import { isRecord } from "../util/values.js";

export const ERROR_SIGNALS: readonly string[] = [
  "401",
  "unauthorized",
  "403",
  "forbidden",
  "500",
  "502",
  "503",
  "504",
  "timeout",
  "connection refused",
  "connection reset",
  "permission denied",
  "rate limit",
  "quota exceeded",
  "invalid api key",
  "token expired",
  "model not found",
  "resource exhausted",
  "deadline exceeded",
];

function textHasSignal(text: string): boolean {
  const lower = text.toLowerCase();
  for (const signal of ERROR_SIGNALS) if (lower.includes(signal)) return true;
  return false;
}

/** A number kept as its JSON text, as Python would print it (`401.0`); its literal if it has no such form. */
function numberText(n: JsonNumberText): string {
  try {
    return numberTextToCanonical(n);
  } catch {
    return n.text;
  }
}

/** Searches string and number values (a status of 401 is a signal) at any depth up to 64. */
export function hasErrorSignal(value: unknown, depth = 0): boolean {
  if (depth > 64) return false;
  if (typeof value === "string") return textHasSignal(value);
  if (typeof value === "number") return textHasSignal(String(value));
  if (value instanceof JsonNumberText) return textHasSignal(numberText(value));
  if (Array.isArray(value)) {
    for (const item of value) if (hasErrorSignal(item, depth + 1)) return true;
    return false;
  }
  if (isRecord(value)) {
    for (const key in value) if (hasErrorSignal(value[key], depth + 1)) return true;
  }
  return false;
}
