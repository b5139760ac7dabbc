// Numbers in canonical JSON: Python's int/float printing, and number literals kept as their source text.
// It does not parse JSON (parse.ts does) and never rounds an integer: unsafe integers are refused.

import { CanonicalizationError } from "./errors.js";

/** The largest integer that a double and a Python int agree on without loss: 2^53 − 1. */
const MAX_SAFE = 9007199254740991;

/** The JSON number grammar (RFC 8259 §6), so a JsonNumberText can only ever hold a real literal. */
const JSON_NUMBER = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$/;

/**
 * A JSON number literal kept as written, so `10.0` (a Python float) stays distinct from `10`.
 * Produced by parseJsonPreservingNumbers and parseJsonKeepingNumberText; canonicalizationError and
 * canonicalHash accept it, canonicalJson only with `{ numberText: true }`.
 */
export class JsonNumberText {
  readonly text: string;
  constructor(text: string) {
    if (!JSON_NUMBER.test(text)) throw new SyntaxError(`not a JSON number literal: ${JSON.stringify(text)}`);
    this.text = text;
  }
  toString(): string {
    return this.text;
  }
}

/**
 * Python's `repr(float)` for a finite double: the shortest round-trip digits (JavaScript's
 * toExponential() with no argument yields the same digits), fixed notation when the decimal
 * exponent e satisfies −4 ≤ e < 16, otherwise `d.ddde±XX` with at least two exponent digits.
 * Integral values keep Python's trailing ".0".
 */
export function pythonFloatRepr(x: number): string {
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const s = x.toExponential();
  const at = s.indexOf("e");
  const exp = Number(s.slice(at + 1));
  const mantissa = s.slice(0, at);
  if (exp < -4 || exp >= 16) {
    const abs = exp < 0 ? -exp : exp;
    return `${mantissa}${exp < 0 ? "e-" : "e+"}${abs < 10 ? "0" : ""}${abs}`;
  }
  const negative = mantissa.charCodeAt(0) === 45;
  const unsigned = negative ? mantissa.slice(1) : mantissa;
  const digits = unsigned.length > 1 ? unsigned[0] + unsigned.slice(2) : unsigned;
  let body: string;
  if (exp < 0) body = `0.${"0".repeat(-exp - 1)}${digits}`;
  else if (digits.length <= exp + 1) body = `${digits}${"0".repeat(exp + 1 - digits.length)}.0`;
  else body = `${digits.slice(0, exp + 1)}.${digits.slice(exp + 1)}`;
  return negative ? `-${body}` : body;
}

/**
 * A JavaScript number as Python prints it, reading an integral value as an int (so -0 prints "0")
 * and anything else as a float. JSON.parse has already folded `10.0` into 10; numberText keeps it.
 */
export function numberToCanonical(x: number): string {
  if (Number.isInteger(x)) {
    if (x > MAX_SAFE || x < -MAX_SAFE) throw new CanonicalizationError("unsafe_integer");
    return `${x}`;
  }
  if (!Number.isFinite(x)) throw new CanonicalizationError("non_finite_number");
  // A non-integral double is below 2^52 < 1e16, so JS and Python both print fixed notation once
  // |x| ≥ 1e-4; only the tiny ones need Python's exponent layout.
  return x >= 1e-4 || x <= -1e-4 ? `${x}` : pythonFloatRepr(x);
}

/** True when `text` is a float literal to Python (it has '.', 'e' or 'E'); otherwise an int. */
function isFloatLiteral(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 46 || c === 101 || c === 69) return true;
  }
  return false;
}

/** False for a float literal that overflows to infinity (`1e400`), which allow_nan=False refuses. */
export function numberTextIsFinite(n: JsonNumberText): boolean {
  return !isFloatLiteral(n.text) || Number.isFinite(Number(n.text));
}

/**
 * A literal as Python's json module re-prints it: with '.', 'e' or 'E' it is a float (repr of
 * float(text), which may overflow to inf and is then refused); otherwise an exact int of any size.
 */
export function numberTextToCanonical(n: JsonNumberText): string {
  const text = n.text;
  if (isFloatLiteral(text)) {
    const x = Number(text);
    if (!Number.isFinite(x)) throw new CanonicalizationError("non_finite_number");
    return pythonFloatRepr(x);
  }
  return text === "-0" ? "0" : text;
}

/**
 * Whether a JavaScript number prints exactly as Python prints the literal it was parsed from, so
 * that the number may stand in for the literal in a digest: true for `100`, `0.5`, `-0` and
 * `1e-7`; false for `10.0`, `1e5`, `-0.0` (floats to Python), `1e16` and big integers.
 */
export function numberSuffices(text: string, x: number): boolean {
  if (!Number.isFinite(x)) return false;
  // A non-integral double: Python's repr of float(text) is exactly numberToCanonical(x).
  if (!Number.isInteger(x)) return true;
  // An integral one: an int literal within the safe range prints as the same digits; a float
  // literal (`10.0`) keeps Python's ".0" or exponent, and beyond ±(2^53−1) x is not the literal.
  return !isFloatLiteral(text) && x <= MAX_SAFE && x >= -MAX_SAFE;
}
