// Exponential backoff with full jitter, for a relay whose sink keeps failing.
// Only the delay; sleeping and counting failures belong to the relay loop.

export interface BackoffOptions {
  /** Upper bound of the first delay (default 100 ms). */
  baseMs?: number;
  /** Largest delay (default 30,000 ms). */
  maxMs?: number;
}

/**
 * A delay for the n-th consecutive failure (n >= 1): uniform in [0, min(maxMs, baseMs · 2^(n−1))).
 * Full jitter, not equal steps: relays that failed together (the sink went down under all of them)
 * wake at scattered times instead of hitting it again in one burst.
 */
export function backoffDelay(
  failures: number,
  options: Required<BackoffOptions>,
  random: () => number,
): number {
  const exponent = Math.min(Math.max(failures - 1, 0), 52);
  const ceiling = Math.min(options.maxMs, options.baseMs * 2 ** exponent);
  return Math.floor(random() * ceiling);
}
