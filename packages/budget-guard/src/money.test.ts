// Unit and property tests of the pure money functions: parsing, canonical strings, exact arithmetic.
// Nothing here touches a store; reservations against real substrates are tested in reservations.test.ts.

import { Decimal } from "decimal.js";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BudgetGuardError, InvalidAmountError } from "./errors.js";
import {
  accountAvailable,
  addMoney,
  chainAvailable,
  clampAtZero,
  isCanonicalMoney,
  judgeReservation,
  Money,
  moneyString,
  overrunOf,
  readStoredMoney,
  subtractMoney,
  toMoney,
  ZERO,
} from "./money.js";

/** Any amount in range: up to 20 integer digits and up to 18 decimal places. */
const anyAmount = fc
  .tuple(
    fc.bigInt({ min: 0n, max: 10n ** 20n - 1n }),
    fc.bigInt({ min: 0n, max: 10n ** 18n - 1n }),
    fc.integer({ min: 0, max: 18 }),
  )
  .map(([whole, fraction, scale]) =>
    new Money(`${whole}.${fraction.toString().padStart(18, "0")}`).toDecimalPlaces(scale, Decimal.ROUND_DOWN),
  );

const account = (limit: string, spent: string, reserved: string, id = "a") => ({
  account_id: id,
  limit_usd: limit,
  spent_usd: spent,
  reserved_usd: reserved,
});

describe("toMoney", () => {
  it("converts a JS number through its shortest decimal string, not its binary expansion", () => {
    expect(moneyString(toMoney(0.1))).toBe("0.1");
    expect(moneyString(toMoney(0.001))).toBe("0.001");
    expect(moneyString(toMoney(1e-7))).toBe("0.0000001");
    expect(moneyString(toMoney(0.1 + 0.2))).toBe("0.30000000000000004");
    expect(moneyString(toMoney(123456.789))).toBe("123456.789");
    // decimal.js given the binary value itself would print 0.1000000000000000055511151231257827…
    expect(toMoney(0.1).eq(new Decimal("0.1"))).toBe(true);
  });

  it("accepts plain decimal strings and Decimal instances", () => {
    expect(moneyString(toMoney("1.000"))).toBe("1");
    expect(moneyString(toMoney("+0.50"))).toBe("0.5");
    expect(moneyString(toMoney(".5"))).toBe("0.5");
    expect(moneyString(toMoney("1e-3"))).toBe("0.001");
    expect(moneyString(toMoney("2.5E+3"))).toBe("2500");
    expect(moneyString(toMoney(new Decimal("7.25")))).toBe("7.25");
  });

  it("treats negative zero as zero", () => {
    expect(moneyString(toMoney(-0))).toBe("0");
    expect(moneyString(toMoney("-0.000"))).toBe("0");
    expect(toMoney("-0").isNegative()).toBe(false);
  });

  it.each([
    ["NaN", Number.NaN],
    ["Infinity", Number.POSITIVE_INFINITY],
    ["-Infinity", Number.NEGATIVE_INFINITY],
    ["a negative number", -0.01],
    ["a negative string", "-1"],
    ["the string NaN", "NaN"],
    ["the string Infinity", "Infinity"],
    ["hexadecimal", "0x10"],
    ["binary", "0b1"],
    ["whitespace", " 1"],
    ["an empty string", ""],
    ["a comma decimal", "1,5"],
    ["more than 18 decimal places", "0.0000000000000000001"],
    ["10^21", "1e21"],
    ["a Decimal NaN", new Decimal(Number.NaN)],
  ])("rejects %s with InvalidAmountError (code invalid_amount)", (_label, value) => {
    let caught: unknown;
    try {
      toMoney(value as number | string);
    } catch (error) {
      caught = error;
    }
    expect(InvalidAmountError.isInstance(caught)).toBe(true);
    expect(BudgetGuardError.isInstance(caught)).toBe(true);
    expect((caught as InvalidAmountError).code).toBe("invalid_amount");
    expect((caught as InvalidAmountError).value).toBe(value);
  });

  it("rejects values that are not numbers, strings or Decimals", () => {
    expect(() => toMoney(null as unknown as number)).toThrow(InvalidAmountError);
    expect(() => toMoney(10n as unknown as number)).toThrow(InvalidAmountError);
  });

  it("keeps the largest accepted amounts exact", () => {
    const largest = "999999999999999999999.999999999999999999"; // 39 significant digits
    expect(moneyString(toMoney(largest))).toBe(largest);
  });

  it("uses its own decimal.js configuration, whatever the global one says", () => {
    const saved = Decimal.precision;
    Decimal.set({ precision: 5 });
    try {
      expect(moneyString(addMoney(toMoney("1234567.891"), toMoney("0.000000001")))).toBe("1234567.891000001");
    } finally {
      Decimal.set({ precision: saved });
    }
  });
});

describe("moneyString", () => {
  it("writes plain digits: no exponent, no trailing zeros, no sign on zero", () => {
    expect(moneyString(new Money("1e-9"))).toBe("0.000000001");
    expect(moneyString(new Money("1e20"))).toBe("100000000000000000000");
    expect(moneyString(new Money("10.100"))).toBe("10.1");
    expect(moneyString(new Money("-0"))).toBe("0");
    expect(moneyString(ZERO)).toBe("0");
  });

  it("refuses to write a negative amount", () => {
    expect(() => moneyString(new Money("-1"))).toThrow(InvalidAmountError);
  });

  it("what it prints parses back (from the parse memo) as Money with the same value", () => {
    fc.assert(
      fc.property(anyAmount, anyAmount, (a, b) => {
        const sum = addMoney(a, b);
        const parsed = toMoney(moneyString(sum));
        expect(parsed.constructor).toBe(Money);
        expect(parsed.eq(sum)).toBe(true);
        // The memo must not change what is refused.
        expect(() => toMoney(`-${moneyString(sum)}`)).toThrow(InvalidAmountError);
      }),
      { numRuns: 300 },
    );
  });

  it("never hands out another Decimal constructor's instance for text it printed", () => {
    // A global Decimal runs at precision 20: reused as money, a later sum would round.
    const foreign = new Decimal("12345678901234567890.5");
    const text = moneyString(foreign);
    const parsed = toMoney(text);
    expect(parsed.constructor).toBe(Money);
    expect(moneyString(addMoney(parsed, toMoney("0.000000000000000001")))).toBe(
      "12345678901234567890.500000000000000001",
    );
  });

  it("round-trips: parsing a canonical string gives back the same string", () => {
    fc.assert(
      fc.property(anyAmount, (amount) => {
        const text = moneyString(amount);
        expect(isCanonicalMoney(text)).toBe(true);
        expect(moneyString(toMoney(text))).toBe(text);
      }),
      { numRuns: 1000 },
    );
  });

  it("isCanonicalMoney rejects non-canonical spellings", () => {
    for (const text of ["1.0", "01", "1e3", "+1", "-0", ".5", "0.10", " 1", "-1", "abc"]) {
      expect(isCanonicalMoney(text)).toBe(false);
    }
    for (const text of ["0", "1", "0.001", "1000", "12.5"]) expect(isCanonicalMoney(text)).toBe(true);
  });
});

describe("exact arithmetic", () => {
  it("adds without float error", () => {
    expect(moneyString(addMoney(toMoney(0.1), toMoney(0.2)))).toBe("0.3");
    let total = ZERO;
    for (let i = 0; i < 10; i++) total = addMoney(total, toMoney(0.1));
    expect(moneyString(total)).toBe("1");
  });

  it("subtracts into negatives without rounding (callers clamp)", () => {
    expect(subtractMoney(toMoney("1"), toMoney("1.5")).toFixed()).toBe("-0.5");
  });

  it("fails with overflow instead of rounding past the exact range", () => {
    const big = toMoney("999999999999999999999");
    let caught: unknown;
    try {
      addMoney(big, toMoney(1));
    } catch (error) {
      caught = error;
    }
    expect(BudgetGuardError.isInstance(caught) && caught.code).toBe("overflow");
  });

  it("draws the range line exactly at ±10^21, on both sides of zero", () => {
    const largest = toMoney("999999999999999999999.999999999999999999");
    const step = toMoney("0.000000000000000001");
    expect(addMoney(largest, toMoney(0)).eq(largest)).toBe(true);
    expect(subtractMoney(toMoney(0), largest).toFixed()).toBe("-999999999999999999999.999999999999999999");
    const code = (fn: () => unknown) => {
      try {
        fn();
        return null;
      } catch (error) {
        return BudgetGuardError.isInstance(error) ? error.code : "other";
      }
    };
    expect(code(() => addMoney(largest, step))).toBe("overflow");
    expect(code(() => subtractMoney(subtractMoney(toMoney(0), largest), step))).toBe("overflow");
  });

  it("is exact for any two in-range amounts (a + b − b = a)", () => {
    fc.assert(
      fc.property(anyAmount, anyAmount, (a, b) => {
        const sum = addMoney(a, b);
        expect(subtractMoney(sum, b).eq(a)).toBe(true);
        expect(sum.eq(b.plus(a))).toBe(true);
      }),
      { numRuns: 1000 },
    );
  });

  it("computes overrun as max(0, actual − estimate)", () => {
    expect(moneyString(overrunOf(toMoney("0.10"), toMoney("0.25")))).toBe("0.15");
    expect(moneyString(overrunOf(toMoney("0.10"), toMoney("0.05")))).toBe("0");
  });
});

describe("available and judgeReservation", () => {
  it("is limit − spent − reserved, clamped at 0", () => {
    expect(moneyString(accountAvailable(account("1", "0.25", "0.5")))).toBe("0.25");
    expect(moneyString(accountAvailable(account("1", "1.2", "0")))).toBe("0");
    expect(accountAvailable(account("1", "1.2", "0")).isNegative()).toBe(false);
  });

  it("takes the least over a chain, and an empty chain allows nothing", () => {
    const chain = [
      account("5", "0", "0", "child"),
      account("10", "9.5", "0.25", "parent"),
      account("100", "0", "0"),
    ];
    expect(moneyString(chainAvailable(chain))).toBe("0.25");
    expect(moneyString(chainAvailable([]))).toBe("0");
  });

  it("reports a corrupt stored amount as corrupt, keeping the cause", () => {
    let caught: unknown;
    try {
      accountAvailable(account("1", "1e400", "0"));
    } catch (error) {
      caught = error;
    }
    expect(BudgetGuardError.isInstance(caught) && caught.code).toBe("corrupt");
    expect(InvalidAmountError.isInstance((caught as Error).cause)).toBe(true);
    expect((caught as Error).message).toMatch(/^account ".+" spent_usd holds an invalid amount: "1e400"$/);
    expect(() => readStoredMoney(12, "x")).toThrow(/x holds an invalid amount/);
  });

  it("mirrors SP/1.0 rules 5 and 5b: exhausted at ≤ 0, overrun when the call exceeds what is left", () => {
    expect(judgeReservation(ZERO, toMoney("0.01"))).toEqual({ ok: false, code: "budget_exhausted" });
    expect(judgeReservation(ZERO, ZERO)).toEqual({ ok: false, code: "budget_exhausted" });
    expect(judgeReservation(toMoney("0.5"), toMoney("0.51"))).toEqual({ ok: false, code: "budget_overrun" });
    expect(judgeReservation(toMoney("0.5"), toMoney("0.5"))).toEqual({ ok: true });
    expect(judgeReservation(toMoney("0.5"), ZERO)).toEqual({ ok: true });
  });
});

/** A cost as a test would write it: a JS number (with its binary inexactness) or decimal text. */
const cost = fc
  .tuple(fc.integer({ min: 1, max: 1_000_000 }), fc.integer({ min: 0, max: 9 }), fc.boolean())
  .map(([units, scale, asNumber]) => {
    const text = moneyString(new Money(units).div(new Money(10).pow(scale)));
    return asNumber ? Number(text) : text;
  });

describe("exhaustion is exact (property)", () => {
  it("1,000 calls of $0.001 exhaust $1 exactly at call 1,000; call 1,001 is refused", () => {
    const limit = toMoney(1);
    let spent = ZERO;
    for (let call = 1; call <= 1000; call++) {
      const available = clampAtZero(subtractMoney(limit, spent));
      expect(judgeReservation(available, toMoney(0.001))).toEqual({ ok: true });
      spent = addMoney(spent, toMoney(0.001));
    }
    expect(moneyString(spent)).toBe("1");
    expect(judgeReservation(clampAtZero(subtractMoney(limit, spent)), toMoney(0.001))).toEqual({
      ok: false,
      code: "budget_exhausted",
    });
    // The same loop in binary floats drifts: this is what the decimals prevent.
    let floatSpent = 0;
    for (let call = 1; call <= 1000; call++) floatSpent += 0.001;
    expect(floatSpent).not.toBe(1);
  });

  it("n calls of cost c exhaust a budget of n·c exactly at call n, and call n + 1 is refused", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 1200 }), cost, (n, c) => {
        const price = toMoney(c);
        const limit = toMoney(price.times(n));
        let spent = ZERO;
        for (let call = 1; call <= n; call++) {
          const available = clampAtZero(subtractMoney(limit, spent));
          // Every call up to n fits, and before call n exactly one call's worth is left. Plain
          // booleans, not expect(), in the loop: a million expect() calls dominate the run time.
          if (!judgeReservation(available, price).ok) return false;
          if (call === n && !available.eq(price)) return false;
          spent = addMoney(spent, price);
        }
        expect(spent.eq(limit)).toBe(true);
        expect(moneyString(spent)).toBe(moneyString(limit));
        expect(judgeReservation(clampAtZero(subtractMoney(limit, spent)), price)).toEqual({
          ok: false,
          code: "budget_exhausted",
        });
        return true;
      }),
      { numRuns: 1000 },
    );
  });
});
