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

/** Trimmed, lowercased string; a non-string reads as "" (docs/architecture.md §4: so it can never match a keyword). */
export function norm(value: unknown): string {
  return typeof value === "string" ? value.trim().toLowerCase() : "";
}

/** Nonce equality as Python's `==` on JSON values: 7 == 7.0, but 7 != "7". */
export function sameNonce(a: unknown, b: unknown): boolean {
  return a === b && a !== undefined && a !== null;
}
