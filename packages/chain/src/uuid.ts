// UUIDv7 (RFC 9562 §5.7) from an injected time and injected random bytes, so entry ids are testable.
// It does not guarantee monotonic ids within one tick; chain order is seq, never the id.

import { ChainError } from "./errors.js";

/** A source of random bytes; the default is WebCrypto's getRandomValues. */
export type RandomBytes = (size: number) => Uint8Array;

// One getRandomValues call per 4 KiB instead of per id: the call itself, not the bytes, is the cost
// on the hot path (an entry per decision).
const POOL_SIZE = 4096;
let pool = new Uint8Array(0);
let offset = 0;

export const defaultRandom: RandomBytes = (size) => {
  if (size > POOL_SIZE) return globalThis.crypto.getRandomValues(new Uint8Array(size));
  if (offset + size > pool.length) {
    pool = globalThis.crypto.getRandomValues(new Uint8Array(POOL_SIZE));
    offset = 0;
  }
  const bytes = pool.slice(offset, offset + size);
  offset += size;
  return bytes;
};

const HEX: string[] = [];
for (let i = 0; i < 256; i++) HEX.push(i.toString(16).padStart(2, "0"));

/**
 * A UUIDv7 for the instant `nowNs` (nanoseconds since the Unix epoch). The 48-bit field holds
 * milliseconds; the 12-bit rand_a holds the fraction of the millisecond (RFC 9562 §6.2 method 3),
 * so ids made in one millisecond still sort by time; 62 bits of rand_b come from `random`.
 */
export function uuidv7(nowNs: number | bigint, random: RandomBytes = defaultRandom): string {
  let ms: number;
  let subMs: number;
  if (typeof nowNs === "bigint") {
    if (nowNs < 0n) throw new ChainError("invalid_argument", "nowNs must not be negative");
    ms = Number(nowNs / 1_000_000n);
    subMs = Number(nowNs % 1_000_000n);
  } else {
    if (!Number.isInteger(nowNs) || nowNs < 0) {
      throw new ChainError("invalid_argument", "nowNs must be a non-negative integer (nanoseconds)");
    }
    // % on doubles is exact, so the fraction is right even where nowNs itself passes 2^53.
    subMs = nowNs % 1_000_000;
    ms = (nowNs - subMs) / 1_000_000;
  }
  if (ms >= 2 ** 48) throw new ChainError("invalid_argument", "nowNs is beyond the UUIDv7 time range");
  const randA = Math.floor((subMs * 4096) / 1_000_000);
  let r: Uint8Array;
  let at = 0;
  if (random === defaultRandom) {
    // The pool itself, read in place: no 8-byte copy per id.
    if (offset + 8 > pool.length) {
      pool = globalThis.crypto.getRandomValues(new Uint8Array(POOL_SIZE));
      offset = 0;
    }
    r = pool;
    at = offset;
    offset += 8;
  } else {
    r = random(8);
    if (!(r instanceof Uint8Array) || r.length < 8)
      throw new ChainError("invalid_argument", "random must return bytes");
  }
  // 48 bits of milliseconds are 12 hex digits; below 2^48 toString(16) is exact.
  const time = ms.toString(16).padStart(12, "0");
  return (
    `${time.slice(0, 8)}-${time.slice(8)}-${HEX[0x70 | (randA >> 8)]}${HEX[randA & 0xff]}-` +
    `${HEX[0x80 | (r[at]! & 0x3f)]}${HEX[r[at + 1]!]}-${HEX[r[at + 2]!]}${HEX[r[at + 3]!]}` +
    `${HEX[r[at + 4]!]}${HEX[r[at + 5]!]}${HEX[r[at + 6]!]}${HEX[r[at + 7]!]}`
  );
}
