// The two SHACKLE digests: canonical_hash (call.params) and vector_hash (a whole fixture, sealed).
// Both are SHA-256 over UTF-8 canonical JSON; neither verifies anything, callers compare.

import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex } from "@noble/hashes/utils.js";
import { CanonicalizationError } from "./errors.js";
import { canonicalJson } from "./serialize.js";

/**
 * The SP/1.0 argument digest: lowercase hex SHA-256 of canonicalJson(params), as the reference's
 * canonical_hash(). Any JSON value is hashed (the fixtures publish one for array params too).
 * @throws CanonicalizationError when params have no canonical form.
 */
export function canonicalHash(params: unknown): string {
  return bytesToHex(sha256(utf8Bytes(canonicalJson(params))));
}

/**
 * The SP/1.0.1 vector seal: SHA-256 of the fixture without its `vector_hash` key, with number
 * literals re-printed as Python read them. Exact on parseJsonPreservingNumbers output; on plain
 * JSON.parse output a float literal such as `10.0` has already become 10 and hashes as `10`.
 * @throws CanonicalizationError when the fixture is not an object or has no canonical form.
 */
export function vectorHash(fixture: unknown): string {
  if (typeof fixture !== "object" || fixture === null || Array.isArray(fixture)) {
    throw new CanonicalizationError("not_an_object");
  }
  // A null-prototype copy so a "__proto__" key stays an ordinary own key.
  const sealed: Record<string, unknown> = Object.create(null);
  for (const key of Object.keys(fixture)) {
    if (key !== "vector_hash") sealed[key] = (fixture as Record<string, unknown>)[key];
  }
  return bytesToHex(sha256(utf8Bytes(canonicalJson(sealed, { numberText: true }))));
}

/**
 * UTF-8 bytes of a well-formed string (canonicalJson never returns a lone surrogate).
 * Hand-rolled because core has no TextEncoder in its lib, and because for the short ASCII texts
 * of typical params a plain loop is several times cheaper than a TextEncoder round trip.
 */
export function utf8Bytes(s: string): Uint8Array {
  const n = s.length;
  let size = n;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    // 2 bytes below U+0800, 4 per surrogate pair (2 units), 3 for the rest of the BMP.
    if (c >= 0x80) size += c < 0x800 || (c >= 0xd800 && c <= 0xdfff) ? 1 : 2;
  }
  const out = new Uint8Array(size);
  if (size === n) {
    for (let i = 0; i < n; i++) out[i] = s.charCodeAt(i);
    return out;
  }
  let p = 0;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) {
      out[p++] = c;
    } else if (c < 0x800) {
      out[p++] = 0xc0 | (c >> 6);
      out[p++] = 0x80 | (c & 0x3f);
    } else if (c >= 0xd800 && c <= 0xdbff) {
      const cp = 0x10000 + ((c - 0xd800) << 10) + (s.charCodeAt(++i) - 0xdc00);
      out[p++] = 0xf0 | (cp >> 18);
      out[p++] = 0x80 | ((cp >> 12) & 0x3f);
      out[p++] = 0x80 | ((cp >> 6) & 0x3f);
      out[p++] = 0x80 | (cp & 0x3f);
    } else {
      out[p++] = 0xe0 | (c >> 12);
      out[p++] = 0x80 | ((c >> 6) & 0x3f);
      out[p++] = 0x80 | (c & 0x3f);
    }
  }
  return out;
}
