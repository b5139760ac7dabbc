// Money as exact fixed-point, a bigint count of 10^-18 dollars: the ledger's hot path adds and compares
// integers, not decimal.js digit arrays. Not the ledger's rules (range, sign, text: money.ts); it never rounds.

import { Decimal } from "decimal.js";
import { InvalidAmountError } from "./errors.js";

/** Decimal places every Money carries: one unit is 10^-18 dollars. */
export const UNIT_PLACES = 18;
const UNITS_PER_DOLLAR = 10n ** 18n;

/**
 * Every Money is below 10^100 in magnitude: far above any budget (money.ts keeps amounts below 10^21),
 * and a bound, so that text like "1e999999999" or a runaway `pow` cannot build an enormous bigint.
 */
const MAGNITUDE_EXPONENT = 100;
const MAGNITUDE_UNITS = 10n ** BigInt(MAGNITUDE_EXPONENT + UNIT_PLACES);

/** 10^n as bigints, n = 0 … MAGNITUDE_EXPONENT + UNIT_PLACES: scaling a parsed mantissa is a lookup. */
const POW10: readonly bigint[] = Array.from({ length: MAGNITUDE_EXPONENT + UNIT_PLACES + 1 }, (_, n) =>
  BigInt(`1${"0".repeat(n)}`),
);

/** What Money values are made from: the same inputs decimal.js accepts, plain decimal text only. */
export type MoneyInput = Money | Decimal | string | number | bigint;

/** decimal.js's rounding modes, by the same numbers (`Decimal.ROUND_DOWN` is 1 in both). */
export type RoundingMode = 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8;

// Plain decimal text with an optional exponent: sign, integer digits, fraction digits, exponent.
const DECIMAL_PARTS = /^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/;

/** Why a text is not a Money, or its units; shared with money.ts, which words its own errors. */
export type ParsedUnits = bigint | "syntax" | "places" | "magnitude";

/**
 * Reads plain decimal text ("0.001", "+.5", "2.5E+3", "-1e-7") into units, exactly. With `roundUp`,
 * digits past the 18th place round away from zero instead of being refused (an estimate's hold).
 * Not hexadecimal, "Infinity", "NaN" or whitespace.
 */
export function parseUnits(text: string, roundUp = false): ParsedUnits {
  const parts = DECIMAL_PARTS.exec(text);
  if (parts === null) return "syntax";
  const whole = parts[2]!;
  const fraction = parts[3] ?? "";
  if (whole.length === 0 && fraction.length === 0) return "syntax";
  const negative = parts[1] === "-";
  const exponentText = parts[4];
  if (exponentText === undefined && fraction.length <= UNIT_PLACES && whole.length <= MAGNITUDE_EXPONENT) {
    // The common case, stored canonical text: one BigInt parse of the digits padded to 18 places.
    const units = BigInt(whole + fraction.padEnd(UNIT_PLACES, "0"));
    return negative ? -units : units;
  }
  let digits = whole + fraction;
  let start = 0;
  while (start < digits.length && digits.charCodeAt(start) === 48) start++;
  if (start === digits.length) return 0n; // zero, whatever its sign or exponent
  let end = digits.length;
  while (digits.charCodeAt(end - 1) === 48) end--;
  // value = digits × 10^-places, with neither leading nor trailing zeros in digits
  const exponent = exponentText === undefined ? 0 : Number(exponentText);
  let places = fraction.length - exponent - (digits.length - end);
  digits = digits.slice(start, end);
  if (digits.length - 1 - places >= MAGNITUDE_EXPONENT) return "magnitude";
  let units: bigint;
  if (places <= UNIT_PLACES) {
    units = BigInt(digits) * POW10[UNIT_PLACES - places]!;
  } else {
    if (!roundUp) return "places";
    // Keep the digits down to the 18th place; anything dropped is non-zero (no trailing zeros).
    const kept = digits.length - (places - UNIT_PLACES);
    units = (kept > 0 ? BigInt(digits.slice(0, kept)) : 0n) + 1n;
    places = UNIT_PLACES;
  }
  return negative ? -units : units;
}

/** Prints units as decimal.js's `toFixed()` prints the same value: plain digits, no trailing zeros. */
export function unitsText(units: bigint): string {
  const negative = units < 0n;
  let digits = (negative ? -units : units).toString();
  if (digits.length <= UNIT_PLACES) digits = digits.padStart(UNIT_PLACES + 1, "0");
  const point = digits.length - UNIT_PLACES;
  let end = digits.length;
  while (end > point && digits.charCodeAt(end - 1) === 48) end--;
  const text =
    end === point ? digits.slice(0, point) : `${digits.slice(0, point)}.${digits.slice(point, end)}`;
  return negative ? `-${text}` : text;
}

function unitsOf(value: MoneyInput): bigint {
  if (value instanceof Money) return value.units;
  let text: string;
  if (typeof value === "string") {
    text = value;
  } else if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new InvalidAmountError(value, `amount must be finite, got ${value}`);
    text = String(value); // the shortest round-trip decimal, as decimal.js reads a number
  } else if (typeof value === "bigint") {
    text = value.toString();
  } else if (Decimal.isDecimal(value)) {
    if (!value.isFinite())
      throw new InvalidAmountError(value, `amount must be finite, got ${value.toString()}`);
    if (value.decimalPlaces() > UNIT_PLACES)
      throw new InvalidAmountError(value, `amount has more than ${UNIT_PLACES} decimal places`);
    if (value.e >= MAGNITUDE_EXPONENT)
      throw new InvalidAmountError(value, `amount must be below 10^${MAGNITUDE_EXPONENT}`);
    text = value.toFixed();
  } else if (typeof (value as { units?: unknown } | null)?.units === "bigint") {
    // A Money from another copy of this package (instanceof is per copy).
    return (value as { units: bigint }).units;
  } else {
    throw new InvalidAmountError(
      value,
      `amount must be a number, a decimal string or a Decimal, got ${typeof value}`,
    );
  }
  const units = parseUnits(text);
  if (typeof units === "bigint") return units;
  throw new InvalidAmountError(
    value,
    units === "syntax"
      ? `amount must be a plain decimal, got ${JSON.stringify(text)}`
      : units === "places"
        ? `amount has more than ${UNIT_PLACES} decimal places`
        : `amount must be below 10^${MAGNITUDE_EXPONENT}`,
  );
}

// The constructor parses; money.ts and the methods below make values from units they already have,
// which this token lets them pass through the one constructor (one object shape for V8, no parse).
const FROM_UNITS: unique symbol = Symbol("Money.fromUnits");
let handedUnits = 0n;

/**
 * An exact amount of money with at most 18 decimal places, immutable. Its methods are the part of
 * decimal.js's interface callers of budget-guard use (`plus`, `minus`, `eq`, `toFixed`, …), with the
 * same results, except that nothing rounds: a product or quotient that needs more than 18 places
 * throws a RangeError instead of being rounded.
 */
export class Money {
  /** The amount in units of 10^-18 dollars. */
  readonly units: bigint;
  /** Its plain text once printed: a decision prints the same amounts more than once. */
  #text: string | undefined = undefined;

  /** Exactly `value`; throws InvalidAmountError when it has more than 18 places or is not plain decimal. */
  constructor(value: MoneyInput) {
    this.units = value === (FROM_UNITS as unknown) ? handedUnits : unitsOf(value);
  }

  /** The amount of `units` × 10^-18 dollars, without parsing. */
  static fromUnits(units: bigint): Money {
    handedUnits = units;
    return new Money(FROM_UNITS as unknown as string);
  }

  static readonly ROUND_UP = 0;
  static readonly ROUND_DOWN = 1;
  static readonly ROUND_CEIL = 2;
  static readonly ROUND_FLOOR = 3;
  static readonly ROUND_HALF_UP = 4;
  static readonly ROUND_HALF_DOWN = 5;
  static readonly ROUND_HALF_EVEN = 6;
  static readonly ROUND_HALF_CEIL = 7;
  static readonly ROUND_HALF_FLOOR = 8;

  plus(y: MoneyInput): Money {
    return Money.fromUnits(this.units + unitsOf(y));
  }

  minus(y: MoneyInput): Money {
    return Money.fromUnits(this.units - unitsOf(y));
  }

  /** this × y, exactly; a RangeError when the product needs more than 18 places or 100 digits. */
  times(y: MoneyInput): Money {
    const product = this.units * unitsOf(y);
    if (product % UNITS_PER_DOLLAR !== 0n)
      throw new RangeError("Money.times: the product needs more than 18 decimal places");
    return bounded(product / UNITS_PER_DOLLAR, "times");
  }

  /** this ÷ y, exactly; a RangeError when y is zero or the quotient needs more than 18 places. */
  div(y: MoneyInput): Money {
    const divisor = unitsOf(y);
    if (divisor === 0n) throw new RangeError("Money.div: division by zero");
    const scaled = this.units * UNITS_PER_DOLLAR;
    if (scaled % divisor !== 0n)
      throw new RangeError("Money.div: the quotient needs more than 18 decimal places");
    return bounded(scaled / divisor, "div");
  }

  /** this^n for a whole n ≥ 0, exactly (RangeError otherwise, or past 18 places or 100 digits). */
  pow(n: number): Money {
    if (!Number.isSafeInteger(n) || n < 0)
      throw new RangeError("Money.pow: the exponent must be a whole number ≥ 0");
    let result = ONE;
    for (let i = 0; i < n; i++) result = result.times(this);
    return result;
  }

  neg(): Money {
    return Money.fromUnits(-this.units);
  }

  abs(): Money {
    return this.units < 0n ? this.neg() : this;
  }

  /** -1, 0 or 1, as decimal.js's `comparedTo`. */
  cmp(y: MoneyInput): -1 | 0 | 1 {
    const other = unitsOf(y);
    return this.units < other ? -1 : this.units > other ? 1 : 0;
  }

  eq(y: MoneyInput): boolean {
    return this.units === unitsOf(y);
  }

  lt(y: MoneyInput): boolean {
    return this.units < unitsOf(y);
  }

  lte(y: MoneyInput): boolean {
    return this.units <= unitsOf(y);
  }

  gt(y: MoneyInput): boolean {
    return this.units > unitsOf(y);
  }

  gte(y: MoneyInput): boolean {
    return this.units >= unitsOf(y);
  }

  isZero(): boolean {
    return this.units === 0n;
  }

  isNegative(): boolean {
    return this.units < 0n;
  }

  /** True for zero too, as in decimal.js (whose +0 is positive). */
  isPositive(): boolean {
    return this.units >= 0n;
  }

  /** How many decimal places the value needs (0 … 18). */
  decimalPlaces(): number {
    const text = this.toString();
    const point = text.indexOf(".");
    return point < 0 ? 0 : text.length - point - 1;
  }

  /** Rounded to `dp` places (0 … 18) with decimal.js's rounding `mode` (default ROUND_HALF_EVEN). */
  toDecimalPlaces(dp: number, mode: RoundingMode = Money.ROUND_HALF_EVEN): Money {
    return Money.fromUnits(roundUnits(this.units, dp, mode));
  }

  /**
   * Plain digits, as decimal.js's `toFixed`: without `dp`, exactly the value with no trailing zeros
   * ("0.001", "-0.5", "0"); with `dp`, rounded (by `mode`) and padded to that many places.
   */
  toFixed(dp?: number, mode: RoundingMode = Money.ROUND_HALF_EVEN): string {
    if (dp === undefined) return this.toString();
    const rounded = roundUnits(this.units, dp, mode);
    // A negative value keeps its sign even when it rounds to zero ("-0.00"), as in decimal.js.
    const text = unitsText(rounded < 0n ? -rounded : rounded);
    const sign = this.units < 0n ? "-" : "";
    if (dp === 0) return `${sign}${text}`;
    const point = text.indexOf(".");
    const places = point < 0 ? 0 : text.length - point - 1;
    return `${sign}${text}${point < 0 ? "." : ""}${"0".repeat(dp - places)}`;
  }

  /** The nearest JS number (as decimal.js's `toNumber`: the number its text reads as). */
  toNumber(): number {
    return Number(this.toString());
  }

  toString(): string {
    if (this.#text === undefined) this.#text = unitsText(this.units);
    return this.#text;
  }

  toJSON(): string {
    return this.toString();
  }

  valueOf(): string {
    return this.toString();
  }
}

const ONE = Money.fromUnits(UNITS_PER_DOLLAR);

function bounded(units: bigint, operation: string): Money {
  if (units >= MAGNITUDE_UNITS || units <= -MAGNITUDE_UNITS) {
    throw new RangeError(`Money.${operation}: the result is not below 10^${MAGNITUDE_EXPONENT}`);
  }
  return Money.fromUnits(units);
}

function roundUnits(units: bigint, dp: number, mode: RoundingMode): bigint {
  if (!Number.isInteger(dp) || dp < 0)
    throw new RangeError(`decimal places must be a whole number ≥ 0, got ${dp}`);
  if (dp >= UNIT_PLACES) return units;
  if (!Number.isInteger(mode) || mode < 0 || mode > 8)
    throw new RangeError(`rounding mode must be 0 … 8, got ${mode}`);
  const step = POW10[UNIT_PLACES - dp]!;
  const negative = units < 0n;
  const magnitude = negative ? -units : units;
  const down = magnitude - (magnitude % step); // truncated towards zero
  const rest = magnitude - down;
  if (rest === 0n) return units;
  const half = rest * 2n - step; // < 0 below half, 0 at half, > 0 above
  let away: boolean;
  switch (mode) {
    case 0: // ROUND_UP: away from zero
      away = true;
      break;
    case 1: // ROUND_DOWN: towards zero
      away = false;
      break;
    case 2: // ROUND_CEIL: towards +∞
      away = !negative;
      break;
    case 3: // ROUND_FLOOR: towards −∞
      away = negative;
      break;
    default: {
      if (half !== 0n) {
        away = half > 0n;
        break;
      }
      // exactly half way
      away =
        mode === 4 ||
        (mode === 6 && (down / step) % 2n === 1n) ||
        (mode === 7 && !negative) ||
        (mode === 8 && negative);
    }
  }
  const rounded = away ? down + step : down;
  return negative ? -rounded : rounded;
}
