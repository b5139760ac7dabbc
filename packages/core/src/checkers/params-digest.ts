// The argument digest rule 4 compares: SHA-256 of the params' canonical UTF-8 bytes, with the runtime's hash.
// It chooses the hash; the walk is canonical/, the comparison is rule 4's.
import { decodeUtf8 } from "../canonical/serialize.js";
import { sha256HexOfBytes } from "../crypto/sha256.js";
import type { DecideInputs } from "../types.js";

/**
 * The SHA-256 to apply to canonical bytes: the runtime's byte hash, else its text hash (the bytes
 * decoded first), else core's pure one.
 */
export function bytesHasher(inputs: DecideInputs): (bytes: Uint8Array) => string {
  const { sha256HexOfBytes: ofBytes, sha256Hex: ofText } = inputs;
  if (ofBytes !== undefined) return ofBytes;
  if (ofText !== undefined) return (bytes) => ofText(decodeUtf8(bytes));
  return sha256HexOfBytes;
}
