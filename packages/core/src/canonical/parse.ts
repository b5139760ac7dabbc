// JSON parsing that keeps number literals as written, so values read from text hash the way Python reads them.
// It does not validate or canonicalize; it is not meant for the hot path.

import { parse } from "lossless-json";
import { JsonNumberText, numberSuffices } from "./number.js";

/**
 * Parses JSON text like JSON.parse, except that every number becomes a JsonNumberText holding its
 * literal (`10.0` stays distinguishable from `10`, `12345678901234567890` stays exact).
 * Duplicate keys keep the last value, as both JSON.parse and Python's json.loads do.
 * @throws SyntaxError on malformed JSON.
 */
export function parseJsonPreservingNumbers(text: string): unknown {
  return parse(text, null, {
    parseNumber: (literal) => new JsonNumberText(literal),
    onDuplicateKey: ({ newValue }) => newValue,
  });
}

/**
 * Parses JSON text for a value that will be hashed (call params): like JSON.parse, except that a
 * number whose JavaScript value would hash differently from the literal Python reads (`10.0`,
 * `1e16`, `-0.0`, integers beyond ±(2^53−1), `1e400`) stays a JsonNumberText. Every other number
 * is a plain number, so code that reads params (`status: 401`) sees what JSON.parse gives.
 * Nesting too deep for this recursive parser falls back to JSON.parse: such a value is far beyond
 * the canonicalization depth limit and is refused whichever way its numbers are held.
 * @throws SyntaxError on malformed JSON.
 */
export function parseJsonKeepingNumberText(text: string): unknown {
  try {
    return parse(text, null, {
      parseNumber: (literal) => {
        const x = Number(literal);
        return numberSuffices(literal, x) ? x : new JsonNumberText(literal);
      },
      onDuplicateKey: ({ newValue }) => newValue,
    });
  } catch (error) {
    if (error instanceof RangeError) return JSON.parse(text);
    throw error;
  }
}
