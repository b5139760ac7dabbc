// A log-linear latency histogram (about 1.6 % resolution) that merges across processes through JSON.
// It keeps counts only, never the samples: a 10 s run of 100k calls still crosses a pipe as a few kB.

/** Values below 2^7 ns get a bucket each; above, every power of two is split into 64 buckets. */
const SUB_BUCKETS = 64;
const EXACT_BELOW = 2 * SUB_BUCKETS;

export interface HistogramJson {
  readonly count: number;
  readonly max_ns: number;
  /** [bucket index, count] pairs, sparse. */
  readonly buckets: ReadonlyArray<readonly [number, number]>;
}

export function bucketOf(ns: number): number {
  const v = Math.max(0, Math.floor(ns));
  if (v < EXACT_BELOW) return v;
  let shift = Math.floor(Math.log2(v)) - 6;
  // Math.log2 may round near a power of two; nudge so the mantissa lands in [64, 128).
  while (Math.floor(v / 2 ** shift) >= EXACT_BELOW) shift++;
  while (Math.floor(v / 2 ** shift) < SUB_BUCKETS) shift--;
  return shift * SUB_BUCKETS + Math.floor(v / 2 ** shift);
}

/** The smallest and largest values a bucket holds. */
export function bucketRange(bucket: number): [number, number] {
  if (bucket < EXACT_BELOW) return [bucket, bucket];
  const shift = Math.floor(bucket / SUB_BUCKETS) - 1;
  const mantissa = bucket - shift * SUB_BUCKETS;
  return [mantissa * 2 ** shift, (mantissa + 1) * 2 ** shift - 1];
}

export class LatencyHistogram {
  readonly #counts = new Map<number, number>();
  #count = 0;
  #maxNs = 0;

  get count(): number {
    return this.#count;
  }

  get maxNs(): number {
    return this.#maxNs;
  }

  record(ns: number): void {
    const bucket = bucketOf(ns);
    this.#counts.set(bucket, (this.#counts.get(bucket) ?? 0) + 1);
    this.#count++;
    if (ns > this.#maxNs) this.#maxNs = ns;
  }

  merge(other: HistogramJson): void {
    for (const [bucket, n] of other.buckets) this.#counts.set(bucket, (this.#counts.get(bucket) ?? 0) + n);
    this.#count += other.count;
    if (other.max_ns > this.#maxNs) this.#maxNs = other.max_ns;
  }

  /**
   * The q-quantile (0 < q ≤ 1) as the middle of the bucket holding it, never above the true maximum;
   * 0 when empty.
   */
  quantileNs(q: number): number {
    if (this.#count === 0) return 0;
    const rank = Math.max(1, Math.ceil(q * this.#count));
    let seen = 0;
    for (const bucket of [...this.#counts.keys()].sort((a, b) => a - b)) {
      seen += this.#counts.get(bucket)!;
      if (seen >= rank) {
        const [low, high] = bucketRange(bucket);
        return Math.min((low + high) / 2, this.#maxNs);
      }
    }
    return this.#maxNs;
  }

  toJSON(): HistogramJson {
    return { count: this.#count, max_ns: this.#maxNs, buckets: [...this.#counts.entries()] };
  }
}
