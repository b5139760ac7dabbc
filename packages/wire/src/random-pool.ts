// Random bytes for message ids, drawn from the system's CSPRNG a few KiB at a time: the call, not the
// bytes, is what a fresh draw per id costs. Every byte is handed out once; it is not a seeded generator.

/** Bytes fetched per call to getRandomValues (WebCrypto's limit is 65,536). */
export const RANDOM_POOL_BYTES = 4096;

let pool = new Uint8Array(0);
let offset = 0;

/**
 * `size` (≤ RANDOM_POOL_BYTES) bytes never handed out before: a view into the pool, to be read at once
 * and not kept (the pool is replaced, not rewritten, when it runs out, so the view stays valid).
 */
export function pooledRandom(size: number): Uint8Array {
  if (offset + size > pool.length) {
    pool = globalThis.crypto.getRandomValues(new Uint8Array(RANDOM_POOL_BYTES));
    offset = 0;
  }
  const bytes = pool.subarray(offset, offset + size);
  offset += size;
  return bytes;
}
