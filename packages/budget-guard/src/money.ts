// Exact money: parsing, canonical strings and the few arithmetic steps budgets need, on fixed-point
// Money (fixed-money.ts). Pure (no storage, no clock); accounts.ts and reservations.ts build on it.

import type { BudgetAccount, DecimalString } from "@leash/core";
import { Decimal } from "decimal.js";
import { BudgetGuardError, InvalidAmountError } from "./errors.js";
import { Money, parseUnits, UNIT_PLACES, unitsText } from "./fixed-money.js";

/**
 * The most decimal places an amount may carry. Eighteen covers any per-token price with room to
 * spare; rejecting more (instead of rounding) keeps every stored amount exactly what was asked for.
 */
export const MONEY_SCALE = UNIT_PLACES;

/**
 * Amounts (inputs and results) stay strictly below 10^21. With at most 18 decimal places a value
 * then has at most 39 significant digits; in units of 10^-18 it is an integer below 10^39, and
 * every sum or difference of two of them is an exact bigint.
 */
const MONEY_LIMIT_EXPONENT = 21;

/**
 * decimal.js, configured as money was before it became fixed-point (precision 40, plain digits), for
 * the edges alone: reading a Decimal someone passes in, and wording the refusal of text the fixed-point
 * parser does not take (so every error, and the odd exponent decimal.js reads as 0, stay as they were).
 * Private: the global `Decimal` is shared, mutable configuration that any other library may `set`.
 */
const EdgeDecimal = Decimal.clone({
  precision: 40,
  rounding: Decimal.ROUND_HALF_EVEN,
  toExpNeg: -9e15,
  toExpPos: 9e15,
});

/** A money value: exact, at most 18 decimal places (compare with `.eq`, `.lt`, never `===`). */
export { Money };

export const ZERO: Money = Money.fromUnits(0n);

/** 10^21 in units of 10^-18: every amount stays below it (see MONEY_LIMIT_EXPONENT). */
const LIMIT_UNITS = 10n ** BigInt(MONEY_LIMIT_EXPONENT + MONEY_SCALE);

/** 10^21: every amount stays below it (see MONEY_LIMIT_EXPONENT). */
export const MONEY_LIMIT: Money = Money.fromUnits(LIMIT_UNITS);

// decimal.js also accepts hexadecimal, binary, octal, "Infinity" and "NaN"; money is written in
// plain decimal only, so the grammar is checked before decimal.js sees the text.
const DECIMAL_TEXT = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;

/**
 * Amounts already parsed (or printed by `moneyString`), by their text: a decision reads back the
 * spent and reserved strings the previous one wrote, and a map lookup is cheaper than parsing and
 * range-checking them again. Values are immutable, so sharing them is safe. A full map is emptied
 * rather than evicted from: the live amounts of a busy store come back at once.
 */
const PARSED = new Map<string, Money>();
const PARSED_MAX = 4096;

function remember(text: string, value: Money): void {
  if (PARSED.size >= PARSED_MAX) PARSED.clear();
  PARSED.set(text, value);
}

/** Units that are money: 0 ≤ units < 10^21 dollars. */
function inRange(units: bigint): boolean {
  return units >= 0n && units < LIMIT_UNITS;
}

/**
 * Converts an amount to exact money. A JS number goes through its shortest round-trip decimal
 * string (`String(0.1)` is "0.1"), never its binary expansion (0.1000000000000000055…): the caller
 * meant the number they wrote. Rejects NaN, ±Infinity, negative values, text that is not a plain
 * decimal, more than 18 decimal places and values of 10^21 or more, with `InvalidAmountError`.
 */
export function toMoney(value: number | string | Decimal | Money): Money {
  if (typeof value === "string") {
    const known = PARSED.get(value);
    if (known !== undefined) return known;
    const units = parseUnits(value);
    if (typeof units !== "bigint" || !inRange(units)) return refuseOrRead(value);
    const money = units === 0n ? ZERO : Money.fromUnits(units);
    remember(value, money);
    return money;
  }
  if (value instanceof Money) return inRange(value.units) ? value : refuseOrRead(value);
  if (typeof value === "number" && Number.isFinite(value)) {
    const units = parseUnits(String(value));
    if (typeof units === "bigint" && inRange(units)) return units === 0n ? ZERO : Money.fromUnits(units);
  }
  // A Money from another copy of this package (instanceof is per copy).
  const foreign = (value as { units?: unknown } | null)?.units;
  if (typeof foreign === "bigint") return toMoney(Money.fromUnits(foreign));
  return refuseOrRead(value);
}

/**
 * The amounts the fixed-point fast path does not take, judged as decimal.js judged them: the same
 * refusals in the same words, and the same value for what it accepts (a Decimal instance, and text
 * whose exponent is so small that decimal.js reads it as 0).
 */
function refuseOrRead(value: number | string | Decimal | Money): Money {
  let parsed: Decimal;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new InvalidAmountError(value, `amount must be finite, got ${value}`);
    parsed = new EdgeDecimal(String(value));
  } else if (typeof value === "string") {
    if (!DECIMAL_TEXT.test(value)) {
      throw new InvalidAmountError(
        value,
        `amount must be a plain decimal string, got ${JSON.stringify(value)}`,
      );
    }
    parsed = new EdgeDecimal(value);
  } else if (value instanceof Money) {
    parsed = new EdgeDecimal(value.toFixed());
  } else if (Decimal.isDecimal(value)) {
    if (!value.isFinite())
      throw new InvalidAmountError(value, `amount must be finite, got ${value.toString()}`);
    parsed = new EdgeDecimal(value);
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
  if (parsed.gte(EdgeDecimal.pow(10, MONEY_LIMIT_EXPONENT))) {
    throw new InvalidAmountError(value, `amount must be below 10^${MONEY_LIMIT_EXPONENT}`);
  }
  const money = parsed.isZero() ? ZERO : new Money(parsed);
  if (typeof value === "string") remember(value, money);
  return money;
}

/**
 * The canonical stored form: plain digits, no exponent, no trailing zeros, no sign on zero
 * ("0.001", "1", "0"). Two equal amounts always have the same string, so stores and audit
 * records can compare amounts as text. Negative values are refused unless `allowNegative`
 * (only used to describe a rejected value in an error message). A decimal.js value prints as
 * its `toFixed()`.
 */
export function moneyString(value: Money | Decimal, allowNegative = false): DecimalString {
  if (!(value instanceof Money)) return decimalString(value, allowNegative);
  const units = value.units;
  if (units === 0n) return "0";
  if (units < 0n && !allowNegative) {
    throw new InvalidAmountError(value, "a stored amount cannot be negative");
  }
  const text = value.toString();
  // What toMoney(text) would return, so the next read of this stored text skips the parse; only
  // for amounts toMoney accepts (a negative one, printed for an error message, is not money).
  if (units < LIMIT_UNITS && units > 0n) remember(text, value);
  return text;
}

function decimalString(value: Decimal, allowNegative: boolean): DecimalString {
  if (value.isZero()) return "0";
  if (value.isNegative() && !allowNegative) {
    throw new InvalidAmountError(value, "a stored amount cannot be negative");
  }
  return value.toFixed();
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
  return checkRange(unitsOfMoney(a) + unitsOfMoney(b));
}

/**
 * a − b, exactly. The result may be negative (an overrun makes limit − spent negative), so callers
 * decide whether that is allowed; it is never rounded.
 */
export function subtractMoney(a: Money, b: Money): Money {
  return checkRange(unitsOfMoney(a) - unitsOfMoney(b));
}

// Callers that built their amounts with decimal.js (older code, tests) still get exact results.
function unitsOfMoney(value: Money): bigint {
  return value instanceof Money ? value.units : new Money(value).units;
}

/** |units| below 10^21 dollars, as Money; otherwise `overflow` (never rounded). */
function checkRange(units: bigint): Money {
  return Money.fromUnits(checkUnits(units));
}

function checkUnits(units: bigint): bigint {
  if (units >= LIMIT_UNITS || units <= -LIMIT_UNITS) {
    throw new BudgetGuardError(
      "overflow",
      `amount ${unitsText(units)} is outside the exact range (below 10^21)`,
    );
  }
  return units;
}

/** max(0, value): what is left can be used up, never owed. */
export function clampAtZero(value: Money): Money {
  return unitsOfMoney(value) <= 0n ? ZERO : value instanceof Money ? value : new Money(value);
}

/** The parts of an account its amounts are read from. */
type AccountAmounts = Pick<BudgetAccount, "account_id" | "limit_usd" | "spent_usd" | "reserved_usd">;

/**
 * What a single account still allows: limit − spent − reserved, clamped at 0. Spent may exceed the
 * limit after a truthful overrun; the account then reads 0, never a negative amount.
 */
export function accountAvailable(account: AccountAmounts): Money {
  const left = availableUnits(account);
  return left <= 0n ? ZERO : Money.fromUnits(left);
}

/** limit − spent − reserved in units, unclamped; `overflow` as subtractMoney would fail. */
function availableUnits(account: AccountAmounts): bigint {
  const limit = storedAmount(account, "limit_usd").units;
  const spent = storedAmount(account, "spent_usd").units;
  const reserved = storedAmount(account, "reserved_usd").units;
  return checkUnits(checkUnits(limit - spent) - reserved);
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
  let least: bigint | null = null;
  for (const account of accounts) {
    const left = availableUnits(account);
    if (least === null || left < least) least = left;
  }
  return least === null || least <= 0n ? ZERO : Money.fromUnits(least);
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
  const left = unitsOfMoney(available);
  if (left <= 0n) return { ok: false, code: "budget_exhausted" };
  if (unitsOfMoney(amount) > left) return { ok: false, code: "budget_overrun" };
  return { ok: true };
}

/**
 * The most any account of the chain is past its limit, max(0, spent + reserved − limit): what an
 * overrun beyond what was left amounts to, while `chainAvailable` reads 0.
 */
export function chainOverLimit(accounts: readonly AccountAmounts[]): Money {
  let most = 0n;
  for (const account of accounts) {
    const spent = storedAmount(account, "spent_usd").units;
    const reserved = storedAmount(account, "reserved_usd").units;
    const over = spent + reserved - storedAmount(account, "limit_usd").units;
    if (over > most) most = over;
  }
  return most === 0n ? ZERO : Money.fromUnits(most);
}

/** How far an actual cost went past its estimate: max(0, actual − estimate). */
export function overrunOf(estimate: Money, actual: Money): Money {
  return clampAtZero(subtractMoney(actual, estimate));
}
