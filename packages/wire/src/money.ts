// Money on the wire: the spec's double beside Leash's exact decimal string (shackle.proto "Money").
// It converts and cross-checks; it does no arithmetic (budgets are @leash/budget-guard's).

import { WireError } from "./errors.js";

/** The decimal grammar of shackle.proto: no exponent, no "+", no spaces. */
const DECIMAL = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?$/;
/** Longest decimal string accepted. */
export const MAX_DECIMAL_LENGTH = 40;

/** Whether `text` is a money decimal string of shackle.proto. */
export function isMoneyDecimal(text: string): boolean {
  return typeof text === "string" && text.length <= MAX_DECIMAL_LENGTH && DECIMAL.test(text);
}

/**
 * The amount a (double, decimal) pair carries, as an exact decimal string, or undefined when
 * neither is sent (double 0, decimal ""). The decimal wins when non-empty; a non-zero double
 * must then equal it rounded to the nearest binary64, else the message is refused.
 * @param field names the field in error messages ("estimated_cost_usd").
 * @throws WireError `invalid_decimal` (malformed decimal, or a double that is NaN/±Infinity),
 *   `money_mismatch` (both sent and they disagree).
 */
export function moneyFromWire(double: number, decimal: string, field: string): string | undefined {
  if (decimal !== "") {
    if (!isMoneyDecimal(decimal)) {
      throw new WireError("invalid_decimal", `${field}_decimal "${decimal.slice(0, 50)}" is not a decimal`);
    }
    if (double !== 0 && Number(decimal) !== double) {
      throw new WireError(
        "money_mismatch",
        `${field} is ${double} but ${field}_decimal is "${decimal}" (nearest double ${Number(decimal)})`,
      );
    }
    return decimal;
  }
  if (!Number.isFinite(double)) throw new WireError("invalid_decimal", `${field} is ${double}`);
  return double === 0 ? undefined : doubleToDecimal(double);
}

/**
 * Both wire forms of an amount: the exact decimal and its nearest double. A number is taken as the
 * shortest decimal that reads back as it (0.1 → "0.1").
 * @throws WireError `invalid_decimal` for a malformed string or a non-finite number.
 */
export function moneyToWire(amount: string | number): { double: number; decimal: string } {
  if (typeof amount === "number") {
    if (!Number.isFinite(amount)) throw new WireError("invalid_decimal", `amount ${amount} is not finite`);
    const decimal = doubleToDecimal(amount);
    return { double: Number(decimal), decimal };
  }
  if (!isMoneyDecimal(amount))
    throw new WireError("invalid_decimal", `"${String(amount).slice(0, 50)}" is not a decimal`);
  return { double: Number(amount), decimal: amount };
}

/** The shortest round-tripping decimal of a finite double, written without an exponent. */
function doubleToDecimal(x: number): string {
  if (x === 0) return "0";
  const text = String(x);
  const e = text.indexOf("e");
  let out: string;
  if (e < 0) out = text;
  else {
    const negative = text.startsWith("-");
    const mantissa = text.slice(negative ? 1 : 0, e);
    const exponent = Number(text.slice(e + 1));
    const dot = mantissa.indexOf(".");
    const digits = mantissa.replace(".", "");
    const pointAt = (dot < 0 ? mantissa.length : dot) + exponent;
    if (pointAt <= 0) out = `0.${"0".repeat(-pointAt)}${digits}`;
    else if (pointAt >= digits.length) out = digits + "0".repeat(pointAt - digits.length);
    else out = `${digits.slice(0, pointAt)}.${digits.slice(pointAt)}`;
    if (negative) out = `-${out}`;
  }
  if (out.length > MAX_DECIMAL_LENGTH) {
    throw new WireError(
      "invalid_decimal",
      `${x} needs more than ${MAX_DECIMAL_LENGTH} characters as a decimal`,
    );
  }
  return out;
}
