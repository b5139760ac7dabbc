// Total, never-throwing readers for the untrusted values decide() is handed.
// They mirror the reference's Python reading of JSON values; they do not validate schemas.

/** A plain JSON-like object (not an array, not null). */
export type Rec = Record<string, unknown>;

const EMPTY: Rec = Object.freeze({}) as Rec;

export function isRecord(value: unknown): value is Rec {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The value as an object, or an empty one: a missing or non-object config/state reads as all-defaults. */
export function rec(value: unknown): Rec {
  return isRecord(value) ? value : EMPTY;
}

/** True when the object has at least one own key (Python: a non-empty dict). */
export function nonEmpty(value: unknown): value is Rec {
  if (!isRecord(value)) return false;
  for (const _ in value) return true;
  return false;
}

/** A finite JavaScript number, or undefined for anything else (booleans are not numbers here). */
export function num(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}

/** Present in the Python sense of `x is not None`: neither undefined nor null. */
export function present(value: unknown): boolean {
  return value !== undefined && value !== null;
}

/** Python truthiness, so `circuit_tripped: 1` or `"yes"` trips and `[]`, `{}`, `""`, `0` do not. */
export function truthy(value: unknown): boolean {
  if (value === null || value === undefined || value === false || value === 0 || value === "") return false;
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === "object") return nonEmpty(value) || !isRecord(value);
  return true;
}

/**
 * Whitespace as Python's str.isspace() sees it, which is what the reference's .strip() removes. It is
 * not JavaScript's trim(): U+001C–U+001F and U+0085 are whitespace here, U+FEFF is not.
 */
export function isPythonSpace(c: number): boolean {
  if (c <= 0x20) return c === 0x20 || (c >= 0x09 && c <= 0x0d) || c >= 0x1c;
  if (c < 0x85) return false;
  return (
    c === 0x85 ||
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000
  );
}

/** Python's `s.strip()`: the reference normalizes keywords with it, so a keyword matches the same strings. */
export function pythonStrip(s: string): string {
  let start = 0;
  let end = s.length;
  while (start < end && isPythonSpace(s.charCodeAt(start))) start++;
  while (end > start && isPythonSpace(s.charCodeAt(end - 1))) end--;
  return start === 0 && end === s.length ? s : s.slice(start, end);
}

/**
 * Stripped (as Python strips) and lowercased; a non-string reads as "" (docs/architecture.md §4: so it
 * can never match a keyword).
 */
export function norm(value: unknown): string {
  return typeof value === "string" ? pythonStrip(value).toLowerCase() : "";
}

/** Nonce equality as Python's `==` on JSON values: 7 == 7.0, but 7 != "7". */
export function sameNonce(a: unknown, b: unknown): boolean {
  return a === b && a !== undefined && a !== null;
}
