// The CEL types the policy checker works with, and how they relate (equality, order, the common type).
// Types only: which functions exist is check-calls.ts, the walk over an expression is check.ts.

/** A CEL type as the checker sees it; records are objects with known fields (a misspelt field is an error). */
export type CelT =
  | "bool"
  | "int"
  | "uint"
  | "double"
  | "string"
  | "bytes"
  | "null_type"
  | "dyn"
  | "timestamp"
  | "duration"
  | "type"
  | { readonly list: CelT }
  | { readonly map: readonly [CelT, CelT] }
  | { readonly record: string; readonly fields: Readonly<Record<string, CelT>> };

export class CheckFailure extends Error {
  constructor(
    message: string,
    readonly exprId: bigint,
    readonly kind: "type" | "depth" = "type",
  ) {
    super(message);
  }
}

export function typeName(t: CelT): string {
  if (t === "null_type") return "null";
  if (typeof t === "string") return t;
  if ("list" in t) return `list(${typeName(t.list)})`;
  if ("map" in t) return `map(${typeName(t.map[0])}, ${typeName(t.map[1])})`;
  return t.record;
}

const NUMERIC = new Set<CelT>(["int", "uint", "double"]);
export const isNumeric = (t: CelT) => typeof t === "string" && NUMERIC.has(t);
export const isDyn = (t: CelT) => t === "dyn";

export function sameType(a: CelT, b: CelT): boolean {
  if (typeof a === "string" || typeof b === "string") return a === b;
  if ("list" in a) return "list" in b && sameType(a.list, b.list);
  if ("map" in a) return "map" in b && sameType(a.map[0], b.map[0]) && sameType(a.map[1], b.map[1]);
  return "record" in b && a.record === b.record;
}

/** The common type of two branches or elements: the type itself when equal, else dyn. */
export function join(a: CelT, b: CelT): CelT {
  return sameType(a, b) ? a : "dyn";
}

/** Whether values of these types may be compared with == (CEL's heterogeneous numeric equality included). */
export function comparableForEquality(a: CelT, b: CelT): boolean {
  if (isDyn(a) || isDyn(b) || a === "null_type" || b === "null_type") return true;
  if (isNumeric(a) && isNumeric(b)) return true;
  if (typeof a !== "string" && typeof b !== "string") {
    if ("list" in a && "list" in b) return comparableForEquality(a.list, b.list);
    if ("map" in a && "map" in b)
      return comparableForEquality(a.map[0], b.map[0]) && comparableForEquality(a.map[1], b.map[1]);
    if ("record" in a && "record" in b) return a.record === b.record;
    // A record is passed to CEL as a map with string keys.
    if ("record" in a && "map" in b) return true;
    if ("map" in a && "record" in b) return true;
  }
  return sameType(a, b);
}

export function orderable(a: CelT, b: CelT): boolean {
  if (isDyn(a) || isDyn(b)) return isDyn(a) ? orderableAlone(b) : orderableAlone(a);
  if (isNumeric(a) && isNumeric(b)) return true;
  return typeof a === "string" && a === b && ["string", "bytes", "bool", "timestamp", "duration"].includes(a);
}
const orderableAlone = (t: CelT) =>
  isDyn(t) || isNumeric(t) || ["string", "bytes", "bool", "timestamp", "duration"].includes(t as string);

export const assignable = (actual: CelT, param: CelT) =>
  isDyn(actual) || isDyn(param) || sameType(actual, param);
