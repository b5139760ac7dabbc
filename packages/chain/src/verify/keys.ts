// Public-key helpers every verifier needs: the key id, and reading a raw key given as hex or bytes.
// Browser-safe (@noble/hashes only). Loading key files and signing live in ../keys.ts (Node).

import { sha256 } from "@noble/hashes/sha2.js";
import { ChainError } from "../errors.js";
import { bytesToHex, hexToBytes } from "./encoding.js";

/** Length of a key id: 16 lowercase hex characters (the first 8 bytes of SHA-256 of the raw key). */
export const KEY_ID_LENGTH = 16;

/**
 * The id a chain entry and a receipt name their signing key by: the first 16 hex characters of
 * SHA-256 over the raw 32-byte Ed25519 public key. Hashing (rather than truncating the key, as the
 * Python reference does) keeps ids uniformly spread even for crafted keys.
 */
export function keyId(publicKeyRaw: Uint8Array): string {
  if (!(publicKeyRaw instanceof Uint8Array) || publicKeyRaw.length !== 32) {
    throw new ChainError("invalid_argument", "an Ed25519 public key is 32 raw bytes");
  }
  return bytesToHex(sha256(publicKeyRaw)).slice(0, KEY_ID_LENGTH);
}

/** A raw Ed25519 public key from 64 hex characters or 32 bytes. @throws ChainError "key_invalid". */
export function publicKeyBytes(key: string | Uint8Array): Uint8Array {
  if (key instanceof Uint8Array) {
    if (key.length === 32) return key;
    throw new ChainError("key_invalid", `an Ed25519 public key is 32 bytes, got ${key.length}`);
  }
  const bytes = typeof key === "string" && key.length === 64 ? hexToBytes(key) : null;
  if (bytes === null) {
    throw new ChainError("key_invalid", "an Ed25519 public key in hex is exactly 64 hex characters");
  }
  return bytes;
}
