// JSON parsing that keeps every number literal as written, for sealing fixtures the way Python reads them.
// It does not validate fixtures or canonicalize; it is not meant for the hot path.

import { parse } from "lossless-json";
import { JsonNumberText } from "./number.js";

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
