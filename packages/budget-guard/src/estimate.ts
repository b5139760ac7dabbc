// Reading a call's estimated cost exactly, as the hold it asks for: from a JS number or decimal text.
// Not which estimate applies to a call (the engine's policy) and not whether it fits (judgeReservation).
import { Money, parseUnits } from "./fixed-money.js";
import { MONEY_LIMIT, ZERO } from "./money.js";

/** Longer text is refused before it is parsed: no estimate needs it, and parsing is not free. */
const ESTIMATE_TEXT_MAX = 100;

/**
 * Plain decimal text, an optional `+`, an exponent of at most four digits (as when decimal.js read
 * estimates, where a longer one could under- or overflow to 0 or Infinity). Not hexadecimal,
 * "Infinity" or "NaN"; a sign other than `+` is the negative check's to refuse, with a clearer message.
 */
const ESTIMATE_TEXT = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,4})?$/;

export type EstimateReading =
  | {
      ok: true;
      /**
       * The hold the estimate asks for: the exact value rounded up to MONEY_SCALE places, so it never
       * holds less than asked (and compares with any stored amount exactly as the value would); null
       * when it is beyond the money range, which is more than any budget allows.
       */
      hold: Money | null;
    }
  | { ok: false; problem: string };

/**
 * Reads an estimate without a binary float in between: `"1.0000000000000000000000001"` is more than
 * 1. A number is read through its shortest round-trip text, as `toMoney` reads it. Refused, with a
 * one-line `problem`: NaN, ±Infinity, negative values, text that is not a plain decimal, other types.
 */
export function readEstimate(value: unknown): EstimateReading {
  let text: string;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) return { ok: false, problem: `must be a finite number, got ${value}` };
    text = String(value);
  } else if (typeof value === "string") {
    if (value.length > ESTIMATE_TEXT_MAX || !ESTIMATE_TEXT.test(value)) {
      const shown = value.length > 40 ? `${JSON.stringify(value.slice(0, 40))}…` : JSON.stringify(value);
      return { ok: false, problem: `must be a plain decimal such as 0.25, got ${shown}` };
    }
    text = value;
  } else {
    return { ok: false, problem: `must be a number or a decimal string, got ${describeType(value)}` };
  }
  // Exact to 18 places, the rest rounded up (away from zero); "magnitude": 10^100 or more.
  const units = parseUnits(text, true);
  if (units === 0n) return { ok: true, hold: ZERO };
  if (units === "magnitude") return text.startsWith("-") ? negative(text) : { ok: true, hold: null };
  if (typeof units !== "bigint")
    throw new Error(`readEstimate: ${JSON.stringify(text)} passed the grammar check`);
  if (units < 0n) return negative(text);
  return { ok: true, hold: units >= MONEY_LIMIT.units ? null : Money.fromUnits(units) };
}

function negative(text: string): EstimateReading {
  return { ok: false, problem: `must not be negative, got ${text}` };
}

function describeType(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : typeof value;
}
