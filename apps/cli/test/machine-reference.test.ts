// Tests for the machine reference of `leash bench engine`: what it times, and that its rate is its own count over its own time.
// No speed is asserted: the bounds follow from the counted signatures and the clock around the call.

import { referenceRate } from "@leash/bench";
import { generateKeyPair, type Signer } from "@leash/chain";
import { describe, expect, it } from "vitest";

function countingSigner(): { signer: Signer; count: () => number } {
  const { signer } = generateKeyPair();
  let signed = 0;
  return {
    signer: {
      ...signer,
      sign(message) {
        signed++;
        return signer.sign(message);
      },
    },
    count: () => signed,
  };
}

describe("referenceRate", () => {
  it("signs one entry per operation and reports only the timed ones, over at least the time asked", () => {
    const { signer, count } = countingSigner();
    const seconds = 0.2;
    const t0 = performance.now();
    const rate = referenceRate(signer, seconds);
    const outer = (performance.now() - t0) / 1000;
    // 2,000 untimed warm-up entries, then whole batches of 16 until the time is up.
    const timed = count() - 2000;
    expect(timed).toBeGreaterThanOrEqual(16);
    expect(timed % 16).toBe(0);
    // Its own window lies inside ours and lasts at least `seconds`.
    expect(rate).toBeGreaterThanOrEqual(timed / outer);
    expect(rate).toBeLessThanOrEqual(timed / seconds);
  });

  it("refuses a duration that is not a positive number", () => {
    const { signer } = generateKeyPair();
    for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => referenceRate(signer, bad)).toThrow(RangeError);
    }
  });
});
