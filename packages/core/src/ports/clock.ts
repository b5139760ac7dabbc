// The clock and random-number ports: the runtime's only sources of time and chance.
// Core never reads either itself (P2); engines inject them, and tests pass fixed ones.

/** Daemon time. MUST be non-decreasing within a process; nanoseconds since the Unix epoch. */
export interface Clock {
  nowNs(): number;
}

/** A uniform random number in [0, 1). Only probabilistic denial consumes it, and the runtime records it. */
export type Rng = () => number;
