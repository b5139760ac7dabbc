// A clock for tests that the test moves by hand, so leases and holds expire when it says, not on a timer.
// Not a fake timer: it only answers Clock.nowNs(); nothing else in the process is affected.

import type { Clock } from "@leash/core";

/**
 * Starts at `startNs` and moves only by `advanceMs`. The default start is below 2^53 so that adding
 * milliseconds stays exact (real epoch-ns readings are 256 apart up there).
 */
export function manualClock(startNs = 1_000_000_000_000_000): Clock & { advanceMs(ms: number): void } {
  let now = startNs;
  return {
    nowNs: () => now,
    advanceMs: (ms) => {
      now += ms * 1_000_000;
    },
  };
}
