// readEstimate: exact reading of estimates from numbers and decimal text, and what it refuses.
import { describe, expect, it } from "vitest";
import { readEstimate } from "./estimate.js";
import { moneyString } from "./money.js";

const hold = (value: unknown) => {
  const r = readEstimate(value);
  if (!r.ok) return `refused: ${r.problem}`;
  return r.hold === null ? "beyond range" : moneyString(r.hold);
};

describe("readEstimate", () => {
  it("reads numbers through their shortest text and decimal text exactly, rounding a hold up to 18 places", () => {
    expect(hold(0.1)).toBe("0.1");
    expect(hold(-0)).toBe("0");
    expect(hold("-0")).toBe("0");
    expect(hold("+0.25")).toBe("0.25");
    expect(hold("1.0000000000000000000000001")).toBe("1.000000000000000001");
    expect(hold("1.000000000000000000")).toBe("1");
    expect(hold(".5e1")).toBe("5");
    expect(hold("1e-30")).toBe("0.000000000000000001");
    expect(hold(1e-30)).toBe("0.000000000000000001");
    expect(hold("999999999999999999999.999999999999999999")).toBe("999999999999999999999.999999999999999999");
  });

  it("marks amounts of 10^21 or more as beyond range (more than any budget), not as errors", () => {
    expect(hold("1e21")).toBe("beyond range");
    expect(hold(1e300)).toBe("beyond range");
    expect(hold("999999999999999999999.9999999999999999991")).toBe("beyond range");
  });

  it("refuses NaN, infinities, negatives, non-decimal text and other types with a one-line problem", () => {
    for (const value of [
      Number.NaN,
      Number.POSITIVE_INFINITY,
      -1,
      "-0.1",
      "abc",
      "0x1",
      "Infinity",
      "NaN",
      "",
      " 1",
      "1e99999",
      "1".repeat(101),
      null,
      {},
      [],
      true,
      1n,
    ]) {
      const r = readEstimate(value);
      expect(r.ok, String(value)).toBe(false);
      if (!r.ok) expect(r.problem).toMatch(/^must [^\n]+$/);
    }
  });
});
