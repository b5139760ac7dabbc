// Exact money: parsing, canonical strings and the few arithmetic steps budgets need, all in decimal.js.
// Pure (no storage, no clock); the store-touching functions in accounts.ts and reservations.ts build on it.

import type { BudgetAccount, DecimalString } from "@leash/core";
import { Decimal } from "decimal.js";
import { BudgetGuardError, InvalidAmountError } from "./errors.js";

/**
 * The most decimal places an amount may carry. Eighteen covers any per-token price with room to
 * spare; rejecting more (instead of rounding) keeps every stored amount exactly what was asked for.
 */
export const MONEY_SCALE = 18;

/**
 * Amounts (inputs and results) stay strictly below 10^21. With at most 18 decimal places a value
 * then has at most 39 significant digits, so the sum or difference of two of them has at most 40
 * and the 40-digit context below never rounds: every addition and subtraction here is exact.
 */
const MONEY_LIMIT_EXPONENT = 21;

/**
 * A private decimal.js constructor: the global `Decimal` is shared, mutable configuration that any
 * other library may `set`, so budgets never depend on it. HALF_EVEN only matters if a rounding step
 * is ever added (none happens within the range above); the wide exponent thresholds make `toString`
 * print plain digits, never "1e-7".
 */
export const Money = Decimal.clone({
  precision: 40,
  rounding: Decimal.ROUND_HALF_EVEN,
  toExpNeg: -9e15,
  toExpPos: 9e15,
});

/** A money value: a decimal.js instance made by `Money` (compare with `.eq`, `.lt`, never `===`). */
export type Money = Decimal;

export const ZERO: Money = new Money(0);

/** 10^21: every amount stays below it (see MONEY_LIMIT_EXPONENT). */
export const MONEY_LIMIT: Money = new Money(10).pow(MONEY_LIMIT_EXPONENT);

// decimal.js also accepts hexadecimal, binary, octal, "Infinity" and "NaN"; money is written in
// plain decimal only, so the grammar is checked before decimal.js sees the text.
const DECIMAL_TEXT = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;

/**
 * Amounts already parsed (or printed by `moneyString`), by their text: a decision reads back the
 * spent and reserved strings the previous one wrote, and parsing and range-checking them again is
 * a large share of a budget check. Values are immutable, so sharing them is safe. A full map is
 * emptied rather than evicted from: the live amounts of a busy store come back at once.
 */
const PARSED = new Map<string, Money>();
const PARSED_MAX = 4096;

function remember(text: string, value: Money): void {
  if (PARSED.size >= PARSED_MAX) PARSED.clear();
  PARSED.set(text, value);
}

/**
 * Converts an amount to exact money. A JS number goes through its shortest round-trip decimal
 * string (`String(0.1)` is "0.1"), never its binary expansion (0.1000000000000000055…): the caller
 * meant the number they wrote. Rejects NaN, ±Infinity, negative values, text that is not a plain
 * decimal, more than 18 decimal places and values of 10^21 or more, with `InvalidAmountError`.
 */
export function toMoney(value: number | string | Decimal): Money {
  let parsed: Money;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new InvalidAmountError(value, `amount must be finite, got ${value}`);
    parsed = new Money(String(value));
  } else if (typeof value === "string") {
    const known = PARSED.get(value);
    if (known !== undefined) return known;
    if (!DECIMAL_TEXT.test(value)) {
      throw new InvalidAmountError(
        value,
        `amount must be a plain decimal string, got ${JSON.stringify(value)}`,
      );
    }
    parsed = new Money(value);
  } else if (Decimal.isDecimal(value)) {
    if (!value.isFinite())
      throw new InvalidAmountError(value, `amount must be finite, got ${value.toString()}`);
    parsed = new Money(value);
  } else {
    throw new InvalidAmountError(
      value,
      `amount must be a number, a decimal string or a Decimal, got ${typeof value}`,
    );
  }
  if (parsed.isNegative() && !parsed.isZero()) {
    throw new InvalidAmountError(value, `amount must not be negative, got ${moneyString(parsed, true)}`);
  }
  if (parsed.decimalPlaces() > MONEY_SCALE) {
    throw new InvalidAmountError(value, `amount has more than ${MONEY_SCALE} decimal places`);
  }
  if (parsed.gte(MONEY_LIMIT)) {
    throw new InvalidAmountError(value, `amount must be below 10^${MONEY_LIMIT_EXPONENT}`);
  }
  // -0 would print as "0" anyway, but an explicit +0 keeps `isNegative()` honest for callers.
  const money = parsed.isZero() ? ZERO : parsed;
  if (typeof value === "string") remember(value, money);
  return money;
}

/**
 * The canonical stored form: plain digits, no exponent, no trailing zeros, no sign on zero
 * ("0.001", "1", "0"). Two equal amounts always have the same string, so stores and audit
 * records can compare amounts as text. Negative values are refused unless `allowNegative`
 * (only used to describe a rejected value in an error message).
 */
export function moneyString(value: Money, allowNegative = false): DecimalString {
  if (value.isZero()) return "0";
  if (value.isNegative() && !allowNegative) {
    throw new InvalidAmountError(value, "a stored amount cannot be negative");
  }
  const text = value.toFixed();
  // What toMoney(text) would return, so the next read of this stored text skips the parse; only
  // for amounts toMoney accepts (a negative one, printed for an error message, is not money), and
  // only instances of Money: another Decimal constructor carries its own precision into arithmetic.
  if (
    value.constructor === Money &&
    !value.isNegative() &&
    value.decimalPlaces() <= MONEY_SCALE &&
    value.lt(MONEY_LIMIT)
  ) {
    remember(text, value);
  }
  return text;
}

/** True when `text` is exactly what `moneyString` writes for some valid amount. */
export function isCanonicalMoney(text: string): boolean {
  try {
    return moneyString(toMoney(text)) === text;
  } catch {
    return false;
  }
}

/**
 * Reads an amount that came out of a store. A bad value there is corruption, not bad input, so it
 * is reported as `corrupt` with the field named; the parse error is kept as `cause`.
 */
export function readStoredMoney(text: unknown, where: string): Money {
  try {
    if (typeof text !== "string")
      throw new InvalidAmountError(text, `expected a decimal string, got ${typeof text}`);
    return toMoney(text);
  } catch (error) {
    throw new BudgetGuardError("corrupt", `${where} holds an invalid amount: ${JSON.stringify(text)}`, {
      cause: error,
    });
  }
}

/** a + b, exactly; fails with `overflow` rather than round when the result would leave the range. */
export function addMoney(a: Money, b: Money): Money {
  return checkRange(a.plus(b));
}

/**
 * a − b, exactly. The result may be negative (an overrun makes limit − spent negative), so callers
 * decide whether that is allowed; it is never rounded.
 */
export function subtractMoney(a: Money, b: Money): Money {
  return checkRange(a.minus(b));
}

function checkRange(value: Money): Money {
  // |value| ≥ 10^21 exactly when its leading digit's exponent is 21 or more; NaN (never expected)
  // fails the test too. Reading the exponent spares an abs() and a comparison on every step.
  if (!(value.e < MONEY_LIMIT_EXPONENT)) {
    throw new BudgetGuardError(
      "overflow",
      `amount ${value.toFixed()} is outside the exact range (below 10^21)`,
    );
  }
  return value;
}

/** max(0, value): what is left can be used up, never owed. */
export function clampAtZero(value: Money): Money {
  return value.isNegative() || value.isZero() ? ZERO : value;
}

/** The parts of an account its amounts are read from. */
type AccountAmounts = Pick<BudgetAccount, "account_id" | "limit_usd" | "spent_usd" | "reserved_usd">;

/**
 * What a single account still allows: limit − spent − reserved, clamped at 0. Spent may exceed the
 * limit after a truthful overrun; the account then reads 0, never a negative amount.
 */
export function accountAvailable(account: AccountAmounts): Money {
  const limit = storedAmount(account, "limit_usd");
  const spent = storedAmount(account, "spent_usd");
  const reserved = storedAmount(account, "reserved_usd");
  return clampAtZero(subtractMoney(subtractMoney(limit, spent), reserved));
}

/**
 * An account's stored amount, read as `readStoredMoney` reads it (a bad one is `corrupt`, the field
 * named); the error's wording is built only when the amount is bad, not on every read.
 */
export function storedAmount(
  account: AccountAmounts,
  field: "limit_usd" | "spent_usd" | "reserved_usd",
): Money {
  const text = account[field];
  return (
    (typeof text === "string" ? PARSED.get(text) : undefined) ??
    readStoredMoney(text, `account ${JSON.stringify(account.account_id)} ${field}`)
  );
}

/**
 * What a chain of accounts allows: the least any of them allows, since a hold is charged to every
 * account in the chain. An empty chain allows nothing: no account, no budget to spend.
 */
export function chainAvailable(accounts: readonly AccountAmounts[]): Money {
  let least: Money | null = null;
  for (const account of accounts) {
    const available = accountAvailable(account);
    if (least === null || available.lt(least)) least = available;
  }
  return least ?? ZERO;
}

export type BudgetRefusal = "budget_exhausted" | "budget_overrun";

/**
 * Whether a hold of `amount` fits in `available`, mirroring SP/1.0 §3.2: rule 5 (nothing left →
 * `budget_exhausted`) is checked before rule 5b (something left, but less than this call →
 * `budget_overrun`). A zero amount fits whenever anything is left.
 */
export function judgeReservation(
  available: Money,
  amount: Money,
): { ok: true } | { ok: false; code: BudgetRefusal } {
  if (available.lte(0)) return { ok: false, code: "budget_exhausted" };
  if (amount.gt(available)) return { ok: false, code: "budget_overrun" };
  return { ok: true };
}

/** How far an actual cost went past its estimate: max(0, actual − estimate). */
export function overrunOf(estimate: Money, actual: Money): Money {
  return clampAtZero(subtractMoney(actual, estimate));
}
