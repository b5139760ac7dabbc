import { describe, expect, it } from "vitest";
import { WireError } from "./errors.js";
import { isMoneyDecimal, moneyFromWire, moneyToWire } from "./money.js";

const code = (f: () => unknown) => {
  try {
    f();
    return "ok";
  } catch (e) {
    return WireError.isInstance(e) ? e.code : "not a WireError";
  }
};

describe("money on the wire", () => {
  it("the decimal string wins; a matching double is fine", () => {
    expect(moneyFromWire(0.1, "0.1", "estimated_cost_usd")).toBe("0.1");
    expect(moneyFromWire(0, "0.001", "estimated_cost_usd")).toBe("0.001");
    expect(moneyFromWire(0, "0", "estimated_cost_usd")).toBe("0");
    // 0.30000000000000004 is the double nearest to neither "0.3" nor… it is 0.1 + 0.2: refused against "0.3".
    expect(code(() => moneyFromWire(0.1 + 0.2, "0.3", "x"))).toBe("money_mismatch");
    // Digits beyond a double's precision still agree when the double is the decimal's nearest.
    expect(moneyFromWire(0.1, "0.1000000000000000000001", "x")).toBe("0.1000000000000000000001");
  });

  it("refuses both sent and disagreeing, and a malformed decimal", () => {
    expect(code(() => moneyFromWire(0.5, "0.4", "x"))).toBe("money_mismatch");
    expect(code(() => moneyFromWire(Number.NaN, "0.4", "x"))).toBe("money_mismatch");
    for (const bad of ["1e3", "+1", " 1", "1.", ".5", "01", "1,5", "0x10", "NaN", "1".repeat(41)]) {
      expect(
        code(() => moneyFromWire(0, bad, "x")),
        bad,
      ).toBe("invalid_decimal");
      expect(isMoneyDecimal(bad)).toBe(false);
    }
  });

  it("takes the double alone (a spec-only peer) as its shortest decimal; 0 alone means not given", () => {
    expect(moneyFromWire(0.002, "", "x")).toBe("0.002");
    expect(moneyFromWire(1e-7, "", "x")).toBe("0.0000001");
    expect(moneyFromWire(1.5e21, "", "x")).toBe("1500000000000000000000");
    expect(moneyFromWire(0, "", "x")).toBeUndefined();
    expect(code(() => moneyFromWire(Number.POSITIVE_INFINITY, "", "x"))).toBe("invalid_decimal");
    expect(code(() => moneyFromWire(1e300, "", "x"))).toBe("invalid_decimal");
  });

  it("moneyToWire fills both forms", () => {
    expect(moneyToWire("0.001")).toEqual({ double: 0.001, decimal: "0.001" });
    expect(moneyToWire(0.5)).toEqual({ double: 0.5, decimal: "0.5" });
    expect(moneyToWire(-0)).toEqual({ double: 0, decimal: "0" });
    expect(code(() => moneyToWire("1e-3"))).toBe("invalid_decimal");
    expect(code(() => moneyToWire(Number.NaN))).toBe("invalid_decimal");
    const { double, decimal } = moneyToWire("123.456");
    expect(moneyFromWire(double, decimal, "x")).toBe("123.456");
  });
});
