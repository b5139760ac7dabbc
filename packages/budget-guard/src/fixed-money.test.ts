// Property tests: fixed-point Money agrees with decimal.js, which did budget-guard's money before it,
// on parsing, arithmetic, comparison and printing; the oracle is the decimal.js code it replaced.

import { Decimal } from "decimal.js";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { readEstimate } from "./estimate.js";
import { Money, parseUnits, type RoundingMode } from "./fixed-money.js";
import { addMoney, chainAvailable, chainOverLimit, moneyString, subtractMoney, toMoney } from "./money.js";

/** Money as it was: decimal.js at 40 digits, plain printing. */
const Old = Decimal.clone({
  precision: 40,
  rounding: Decimal.ROUND_HALF_EVEN,
  toExpNeg: -9e15,
  toExpPos: 9e15,
});
const OLD_LIMIT = new Old(10).pow(21);
const DECIMAL_TEXT = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;

/** The decimal.js toMoney this package had: the accepted value's text, or the refusal's message. */
function oldToMoney(value: number | string): { text: string } | { error: string } {
  if (typeof value === "number" && !Number.isFinite(value))
    return { error: `amount must be finite, got ${value}` };
  if (typeof value === "string" && !DECIMAL_TEXT.test(value)) {
    return { error: `amount must be a plain decimal string, got ${JSON.stringify(value)}` };
  }
  const parsed = new Old(typeof value === "number" ? String(value) : value);
  if (parsed.isNegative() && !parsed.isZero())
    return { error: `amount must not be negative, got ${parsed.toFixed()}` };
  if (parsed.decimalPlaces() > 18) return { error: "amount has more than 18 decimal places" };
  if (parsed.gte(OLD_LIMIT)) return { error: "amount must be below 10^21" };
  return { text: parsed.isZero() ? "0" : parsed.toFixed() };
}

function newToMoney(value: number | string): { text: string } | { error: string } {
  try {
    return { text: moneyString(toMoney(value)) };
  } catch (error) {
    return { error: (error as Error).message };
  }
}

/** The decimal.js readEstimate this package had (past the grammar check, which is unchanged). */
function oldEstimate(text: string): string | null | "negative" {
  const exact = new Old(text);
  if (exact.isZero()) return "0";
  if (exact.isNegative()) return "negative";
  const hold = exact.toDecimalPlaces(18, Decimal.ROUND_UP);
  return hold.gte(OLD_LIMIT) ? null : hold.toFixed();
}

const digits = (min: number, max: number) =>
  fc.array(fc.constantFrom(..."0123456789"), { minLength: min, maxLength: max }).map((d) => d.join(""));

/**
 * Decimal text in every spelling the grammar allows: signs, leading and trailing zeros, a bare point,
 * exponents (up to ±60, which moves values across both the 18-place and the 10^21 lines).
 */
const anyText = fc
  .tuple(
    fc.constantFrom("", "", "+", "-"),
    digits(0, 24),
    fc.option(digits(0, 24), { nil: undefined }),
    fc.option(
      fc.tuple(fc.constantFrom("e", "E"), fc.constantFrom("", "+", "-"), fc.integer({ min: 0, max: 60 })),
      {
        nil: undefined,
      },
    ),
  )
  .map(
    ([sign, whole, fraction, exponent]) =>
      `${sign}${whole}${fraction === undefined ? "" : `.${fraction}`}${exponent === undefined ? "" : exponent.join("")}`,
  );

/** Any amount in range, as decimal.js had it: up to 21 integer digits and up to 18 places. */
const inRange = fc
  .tuple(fc.bigInt({ min: 0n, max: 10n ** 39n - 1n }), fc.integer({ min: 0, max: 18 }))
  .map(([units, places]) =>
    new Old(units.toString()).div(new Old(10).pow(18)).toDecimalPlaces(places, Decimal.ROUND_DOWN),
  );

// Not −0: Money has a single zero (decimal.js's −0 only ever printed as "0" here).
const signed = fc
  .tuple(inRange, fc.boolean())
  .map(([amount, negative]) => (negative && !amount.isZero() ? amount.neg() : amount));
const rounding = fc.integer({ min: 0, max: 8 }) as fc.Arbitrary<RoundingMode>;

describe("fixed-point Money agrees with decimal.js", () => {
  it("parses text exactly as toMoney did: the same amounts accepted, the same refusals in the same words", () => {
    fc.assert(
      fc.property(anyText, (text) => {
        expect(newToMoney(text)).toEqual(oldToMoney(text));
      }),
      { numRuns: 20_000 },
    );
  });

  it("parses JS numbers through their shortest text, as toMoney did", () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.double(), fc.double({ min: 0, max: 1e22 }), fc.double({ min: 0, max: 1 })),
        (n) => {
          expect(newToMoney(n)).toEqual(oldToMoney(n));
        },
      ),
      { numRuns: 20_000 },
    );
  });

  it("keeps the edge cases: text decimal.js read as 0, huge exponents, padded zeros", () => {
    for (const text of [
      "1e-99999999999999999999",
      "1e99999999999999999999",
      "-1e400",
      "0e999999999999",
      "-0.000e-5",
      `0.${"0".repeat(30)}`,
      `${"0".repeat(200)}1.5`,
      `1${"0".repeat(20)}e-3`,
      "999999999999999999999.999999999999999999",
      "1000000000000000000000",
      "5.",
      ".5e1",
    ]) {
      expect(newToMoney(text), text).toEqual(oldToMoney(text));
    }
  });

  it("reads estimates as readEstimate did: exact to 18 places, the rest rounded up, null past the range", () => {
    const estimateText = fc
      .tuple(digits(1, 30), digits(0, 40), fc.integer({ min: -9999, max: 9999 }), fc.boolean())
      .map(([whole, fraction, exponent, withExponent]) =>
        withExponent ? `${whole}.${fraction}e${exponent}` : `${whole}.${fraction}`,
      );
    fc.assert(
      fc.property(estimateText, (text) => {
        const reading = readEstimate(text);
        const expected = oldEstimate(text);
        if (expected === "negative") expect(reading.ok).toBe(false);
        else expect(reading).toEqual({ ok: true, hold: expected === null ? null : toMoney(expected) });
        if (reading.ok && reading.hold !== null) expect(moneyString(reading.hold)).toBe(expected);
      }),
      { numRuns: 20_000 },
    );
  });

  it("adds and subtracts exactly, failing with overflow exactly where the range ends", () => {
    fc.assert(
      fc.property(signed, signed, (a, b) => {
        const x = new Money(a);
        const y = new Money(b);
        for (const [fixed, oracle] of [
          [() => addMoney(x, y), a.plus(b)],
          [() => subtractMoney(x, y), a.minus(b)],
        ] as const) {
          if (oracle.abs().gte(OLD_LIMIT)) {
            expect(fixed).toThrow(/outside the exact range/);
          } else {
            expect(fixed().toFixed()).toBe(oracle.toFixed());
          }
        }
        expect(x.plus(y).toFixed()).toBe(a.plus(b).toFixed());
        expect(x.minus(b).toFixed()).toBe(a.minus(b).toFixed());
      }),
      { numRuns: 5_000 },
    );
  });

  it("compares as decimal.js compares", () => {
    const pair = fc.oneof(
      fc.tuple(signed, signed),
      // Equal, and one unit apart, where an off-by-one would show.
      signed.map((a) => [a, a] as const),
      signed.map((a) => [a, a.plus("0.000000000000000001")] as const),
    );
    fc.assert(
      fc.property(pair, ([a, b]) => {
        const x = new Money(a);
        expect([x.eq(b), x.lt(b), x.lte(b), x.gt(b), x.gte(b), x.cmp(b)]).toEqual([
          a.eq(b),
          a.lt(b),
          a.lte(b),
          a.gt(b),
          a.gte(b),
          a.cmp(b),
        ]);
        expect([x.isZero(), x.isNegative()]).toEqual([a.isZero(), a.isNegative() && !a.isZero()]);
      }),
      { numRuns: 5_000 },
    );
  });

  it("prints as decimal.js prints: toFixed(), toFixed(dp, mode), toDecimalPlaces, toNumber", () => {
    fc.assert(
      fc.property(signed, fc.integer({ min: 0, max: 20 }), rounding, (a, dp, mode) => {
        const x = new Money(a);
        expect(x.toFixed()).toBe(a.toFixed());
        expect(x.toString()).toBe(a.isZero() ? "0" : a.toString());
        expect(x.toFixed(dp, mode)).toBe(a.toFixed(dp, mode));
        expect(x.toDecimalPlaces(dp, mode).toFixed()).toBe(a.toDecimalPlaces(dp, mode).toFixed());
        expect(x.decimalPlaces()).toBe(a.decimalPlaces());
        expect(x.toNumber()).toBe(a.toNumber());
        if (!a.isNegative()) expect(moneyString(x)).toBe(a.isZero() ? "0" : a.toFixed());
      }),
      { numRuns: 5_000 },
    );
  });

  it("multiplies and divides exactly when the result fits in 18 places, and refuses to round otherwise", () => {
    const small = fc
      .tuple(fc.bigInt({ min: -(10n ** 12n), max: 10n ** 12n }), fc.integer({ min: 0, max: 9 }))
      .map(([n, places]) => new Old(n.toString()).div(new Old(10).pow(places)));
    fc.assert(
      fc.property(small, small, (a, b) => {
        const product = a.times(b);
        if (product.decimalPlaces() <= 18) expect(new Money(a).times(b).toFixed()).toBe(product.toFixed());
        else expect(() => new Money(a).times(b)).toThrow(RangeError);
        if (b.isZero()) return;
        const quotient = a.div(b);
        // At 40 digits a quotient that needs more than 18 places shows more than 18 (or is rounded).
        if (quotient.decimalPlaces() <= 18 && quotient.times(b).eq(a)) {
          expect(new Money(a).div(b).toFixed()).toBe(quotient.toFixed());
        } else {
          expect(() => new Money(a).div(b)).toThrow(RangeError);
        }
      }),
      { numRuns: 5_000 },
    );
  });

  it("chain figures are decimal.js's: least available clamped at 0, most over the limit", () => {
    const accountAmounts = fc.tuple(inRange, inRange, inRange).map(([limit, spent, reserved], i) => ({
      account_id: `a${i}`,
      limit_usd: limit.toFixed(),
      spent_usd: spent.toFixed(),
      reserved_usd: reserved.toFixed(),
    }));
    fc.assert(
      fc.property(fc.array(accountAmounts, { maxLength: 4 }), (accounts) => {
        let least: Decimal | null = null;
        let most = new Old(0);
        for (const a of accounts) {
          const left = new Old(a.limit_usd).minus(a.spent_usd).minus(a.reserved_usd);
          if (least === null || left.lt(least)) least = left;
          const over = new Old(a.spent_usd).plus(a.reserved_usd).minus(a.limit_usd);
          if (over.gt(most)) most = over;
        }
        const expected = least === null || least.lte(0) ? "0" : least.toFixed();
        const overflows = accounts.some((a) =>
          new Old(a.limit_usd).minus(a.spent_usd).minus(a.reserved_usd).abs().gte(OLD_LIMIT),
        );
        if (overflows) expect(() => chainAvailable(accounts)).toThrow(/outside the exact range/);
        else expect(chainAvailable(accounts).toFixed()).toBe(expected);
        expect(chainOverLimit(accounts).toFixed()).toBe(most.toFixed());
      }),
      { numRuns: 3_000 },
    );
  });

  it("parseUnits reads units exactly and refuses what it cannot hold", () => {
    expect(parseUnits("0.001")).toBe(1_000_000_000_000_000n);
    expect(parseUnits("-1e-18")).toBe(-1n);
    expect(parseUnits("1e-19")).toBe("places");
    expect(parseUnits("1e-19", true)).toBe(1n);
    expect(parseUnits("1e100")).toBe("magnitude");
    expect(parseUnits("0x10")).toBe("syntax");
    expect(parseUnits(".")).toBe("syntax");
  });
});
