// Two-phase budget holds, after the pending transfers of financial ledgers (TigerBeetle): reserve
// before a call, then settle, release or expire. Runs inside the caller's transaction; never opens one.
import type { BudgetAccount, BudgetStore, Reservation, ReservationStatus, SubstrateTx } from "@leash/core";
import { accountChain } from "./accounts.js";
import { AlreadyResolvedError, BudgetGuardError } from "./errors.js";
import {
  addMoney,
  type BudgetRefusal,
  chainAvailable,
  clampAtZero,
  judgeReservation,
  type Money,
  moneyString,
  overrunOf,
  readStoredMoney,
  storedAmount,
  subtractMoney,
  toMoney,
} from "./money.js";
import { budgetsOf, requireCount, requireId, requirePositiveDuration, requireTimestamp } from "./validate.js";

export interface ReserveInput {
  /**
   * The identity of the hold, and what makes `reserve` idempotent (as a transfer id is in TigerBeetle):
   * the same id with the same request again is a replay, with a different request a conflict.
   */
  reservation_id: string;
  /** The account charged first; its ancestors are charged too. */
  account_id: string;
  session_id: string;
  call_number: number;
  /** The call's estimated cost (spec §4.3 `estimated_cost_usd`). */
  amount_usd: number | string | Money;
  nowNs: number;
  /** How long the hold lives without a settle or release before `expire` may return it. */
  ttlNs: number;
  /** Recorded on the hold until a settle or release replaces it with its own key. */
  idempotency_key?: string | null;
  /**
   * The account chain exactly as `accountChain(tx, account_id)` returned it earlier in this same
   * transaction (where it was read under the transaction's locks), to save reading it again. Never
   * pass a chain read in another transaction: its amounts would be stale.
   */
  accounts?: readonly BudgetAccount[];
  /**
   * The caller knows `reservation_id` was never used (the engine's ids are call numbers, which only
   * grow): no replay can be meant, so the store is not asked for one first. The insert still refuses
   * an id that exists, failing the transaction (fail closed).
   */
  fresh?: boolean;
}

export type ReserveResult =
  | {
      ok: true;
      reservation: Reservation;
      /** What the chain allowed before this call (equal to `availableAfter` on a replay: nothing moved). */
      availableBefore: Money;
      availableAfter: Money;
      /** True when this was a repeat of a reserve already recorded; no money moved this time. */
      replayed: boolean;
    }
  | { ok: false; code: BudgetRefusal; available: Money };

/**
 * Places a hold of `amount_usd` on the account and on every ancestor, or refuses without writing
 * anything: `budget_exhausted` when the chain has nothing left, `budget_overrun` when it has less
 * than the amount (SP/1.0 rules 5 and 5b, judged on the pre-call remaining as rule 5b requires).
 * Because every account in the chain is read through the store (locked on PostgreSQL, serialized
 * on SQLite and memory) before it is charged, concurrent reserves can never hold more than a limit.
 */
export async function reserve(tx: SubstrateTx | BudgetStore, input: ReserveInput): Promise<ReserveResult> {
  const budgets = budgetsOf(tx);
  const amount = checkReserveInput(input);

  if (input.fresh !== true) {
    const existing = await budgets.getReservation(input.reservation_id);
    if (existing !== null) return replayReserve(budgets, existing, input, amount);
  }

  const chain = input.accounts === undefined ? await accountChain(budgets, input.account_id) : input.accounts;
  const plan = planFor(chain, input, amount);
  if (!plan.ok) return plan;
  // Issued together (one round trip on a pipelining store); the transaction fails if either does.
  await Promise.all([
    ...plan.charged.map((account) => budgets.updateAccount(account)),
    budgets.insertReservation(plan.reservation),
  ]);
  return plan.result;
}

/** What a new hold writes: every account of the chain as it becomes, and the reservation row. */
export type HoldPlan =
  | {
      ok: true;
      charged: BudgetAccount[];
      reservation: Reservation;
      result: Extract<ReserveResult, { ok: true }>;
    }
  | Extract<ReserveResult, { ok: false }>;

/**
 * `reserve` for a hold id the caller knows is new (`fresh`), on an account chain it already holds
 * (read under its transaction's locks, as `accounts` must be), without writing: the refusal, or the
 * rows the caller writes itself (the accounts charged and the reservation). Pure; `reserve` is this
 * plus the writes. For a caller that keeps the rows in memory and writes them later (the engine's
 * projection), so that a hold costs no store call of its own.
 */
export function planHold(chain: readonly BudgetAccount[], input: ReserveInput): HoldPlan {
  return planFor(chain, input, checkReserveInput(input));
}

/** Validates a reserve input; returns the amount. */
function checkReserveInput(input: ReserveInput): Money {
  requireId(input.reservation_id, "reservation_id");
  requireId(input.account_id, "account_id");
  requireId(input.session_id, "session_id");
  requireCount(input.call_number, "call_number", 0);
  requireTimestamp(input.nowNs, "nowNs");
  requirePositiveDuration(input.ttlNs, "ttlNs");
  const key = input.idempotency_key ?? null;
  if (key !== null) requireId(key, "idempotency_key");
  return toMoney(input.amount_usd);
}

function planFor(chain: readonly BudgetAccount[], input: ReserveInput, amount: Money): HoldPlan {
  if (chain[0]?.account_id !== input.account_id) {
    throw new BudgetGuardError(
      "account_not_found",
      `the accounts given to reserve start at ${JSON.stringify(chain[0]?.account_id ?? null)}, not at ${JSON.stringify(input.account_id)}`,
    );
  }
  const availableBefore = chainAvailable(chain);
  const verdict = judgeReservation(availableBefore, amount);
  if (!verdict.ok) return { ok: false, code: verdict.code, available: availableBefore };

  const charged = adjustedChain(chain, input.nowNs, { reserved: amount });
  const reservation: Reservation = {
    reservation_id: input.reservation_id,
    account_ids: chain.map((account) => account.account_id),
    session_id: input.session_id,
    call_number: input.call_number,
    amount_usd: moneyString(amount),
    actual_usd: null,
    status: "PENDING",
    idempotency_key: input.idempotency_key ?? null,
    created_ns: input.nowNs,
    expires_ns: input.nowNs + input.ttlNs,
    resolved_ns: null,
  };
  return {
    ok: true,
    charged,
    reservation,
    result: {
      ok: true,
      reservation,
      availableBefore,
      // Every account allowed at least `amount` (the judge saw their least do so), and each now holds
      // `amount` more: the least is less by exactly `amount`, with nothing clamped at zero on the way.
      availableAfter: subtractMoney(availableBefore, amount),
      replayed: false,
    },
  };
}

async function replayReserve(
  budgets: BudgetStore,
  existing: Reservation,
  input: ReserveInput,
  amount: Money,
): Promise<ReserveResult> {
  const sameRequest =
    existing.account_ids[0] === input.account_id &&
    existing.session_id === input.session_id &&
    existing.call_number === input.call_number &&
    readStoredMoney(
      existing.amount_usd,
      `reservation ${JSON.stringify(existing.reservation_id)} amount_usd`,
    ).eq(amount);
  if (!sameRequest) {
    throw new BudgetGuardError(
      "reservation_conflict",
      `reservation ${JSON.stringify(existing.reservation_id)} already exists for another request ` +
        `(account ${JSON.stringify(existing.account_ids[0])}, session ${JSON.stringify(existing.session_id)}, ` +
        `call ${existing.call_number}, amount ${existing.amount_usd})`,
    );
  }
  // The chain is re-read from the stored account ids, not from the current parent links: the hold
  // was charged to those accounts, and they are what it still weighs on.
  const chain = await loadAccounts(budgets, existing);
  const now = chainAvailable(chain);
  return { ok: true, reservation: existing, availableBefore: now, availableAfter: now, replayed: true };
}

export interface SettleOptions {
  /** The truthful actual cost (spec §4.4 `actual_cost_usd`); it may exceed the estimate. */
  actual_usd: number | string | Money;
  nowNs: number;
  /** Settling again with this key returns the first result; with another key fails. */
  idempotency_key: string;
}

export interface SettleResult {
  /** The reservation as stored after settling (status SETTLED, `actual_usd` set). */
  reservation: Reservation;
  /** The estimate that was held (the reservation's `amount_usd`). */
  amount_usd: Money;
  actual_usd: Money;
  /** max(0, actual − estimate): spent more than was held; the account may now be past its limit. */
  overrun_usd: Money;
  /** max(0, estimate − actual): the part of the hold given back (after an expiry, `expire` gave back all of it). */
  released_usd: Money;
  /** True when this repeated an earlier settle with the same key; nothing moved this time. */
  replayed: boolean;
  /** True when the settlement came at or after the hold's expiry (`resolved_ns >= expires_ns`). */
  late: boolean;
}

/**
 * Turns a hold into spending: on every account the hold was charged to, `reserved` drops by the
 * estimate and `spent` grows by the actual. An actual above the estimate is recorded as it is, even
 * when it takes `spent` past the limit: hiding an overrun would make the ledger lie, and the next
 * `available` simply reads 0. A settlement is never refused for coming late, since real money was
 * spent: a PENDING hold past its TTL is settled as usual, one that `chargeExpired` charged at its
 * estimate is corrected to the actual, and one that the older `expire` gave back (EXPIRED without
 * an `actual_usd`) has the actual added to `spent` alone. Settling again with the
 * same key and the same actual is a replay; with another actual it fails with
 * `settlement_conflict` and the first settlement stands.
 */
export async function settle(
  tx: SubstrateTx | BudgetStore,
  reservationId: string,
  options: SettleOptions,
): Promise<SettleResult> {
  const budgets = budgetsOf(tx);
  requireId(reservationId, "reservation_id");
  requireTimestamp(options.nowNs, "nowNs");
  requireId(options.idempotency_key, "idempotency_key");
  const actual = toMoney(options.actual_usd);

  const reservation = await getReservationOrThrow(budgets, reservationId);
  if (reservation.status === "SETTLED" && reservation.idempotency_key === options.idempotency_key) {
    const first = settleResult(reservation, true);
    if (!first.actual_usd.eq(actual)) {
      throw new BudgetGuardError(
        "settlement_conflict",
        `reservation ${JSON.stringify(reservationId)} was settled at ${moneyString(first.actual_usd)}; ` +
          `settling it again at ${moneyString(actual)} is refused (the first settlement stands)`,
      );
    }
    return first;
  }
  const expired = reservation.status === "EXPIRED";
  if (reservation.status !== "PENDING" && !expired) throw alreadyResolved(reservation, "settle");

  const amount = readStoredMoney(
    reservation.amount_usd,
    `reservation ${JSON.stringify(reservationId)} amount_usd`,
  );
  const chain = await loadAccounts(budgets, reservation);
  await adjustChain(budgets, chain, options.nowNs, settlementDelta(reservation, amount, actual));
  const settled: Reservation = {
    ...reservation,
    status: "SETTLED",
    actual_usd: moneyString(actual),
    idempotency_key: options.idempotency_key,
    resolved_ns: options.nowNs,
  };
  await budgets.updateReservation(settled);
  return settleResult(settled, false);
}

/**
 * What a settlement moves. A PENDING hold turns from reserved into spent. An EXPIRED hold that
 * `chargeExpired` charged (its `actual_usd` holds the charge) is corrected from that charge to the
 * actual, which may give part of it back; one that `expire` released (no `actual_usd`) spends the
 * actual alone.
 */
function settlementDelta(
  reservation: Reservation,
  amount: Money,
  actual: Money,
): { reserved?: Money; spent: Money } {
  if (reservation.status === "PENDING") return { reserved: amount.neg(), spent: actual };
  if (reservation.actual_usd === null) return { spent: actual };
  const charged = readStoredMoney(
    reservation.actual_usd,
    `reservation ${JSON.stringify(reservation.reservation_id)} actual_usd`,
  );
  return { spent: subtractMoney(actual, charged) };
}

// Built from the stored reservation alone, so a replay returns exactly what the first settle did.
function settleResult(reservation: Reservation, replayed: boolean): SettleResult {
  const where = `reservation ${JSON.stringify(reservation.reservation_id)}`;
  const amount = readStoredMoney(reservation.amount_usd, `${where} amount_usd`);
  const actual = readStoredMoney(reservation.actual_usd, `${where} actual_usd`);
  return {
    reservation,
    amount_usd: amount,
    actual_usd: actual,
    overrun_usd: overrunOf(amount, actual),
    released_usd: clampAtZero(subtractMoney(amount, actual)),
    replayed,
    late: reservation.resolved_ns !== null && reservation.resolved_ns >= reservation.expires_ns,
  };
}

export interface ReleaseOptions {
  nowNs: number;
  /** Releasing again with the same key (or again without one) is a no-op. */
  idempotency_key?: string | null;
}

export interface ReleaseResult {
  /** The reservation as stored after releasing (status RELEASED). */
  reservation: Reservation;
  /** The hold given back (the whole estimate). */
  released_usd: Money;
  replayed: boolean;
}

/**
 * Gives the whole hold back without spending anything (the call did not run, or the decision was
 * rolled back by the engine). Status becomes RELEASED.
 */
export async function release(
  tx: SubstrateTx | BudgetStore,
  reservationId: string,
  options: ReleaseOptions,
): Promise<ReleaseResult> {
  const budgets = budgetsOf(tx);
  requireId(reservationId, "reservation_id");
  requireTimestamp(options.nowNs, "nowNs");
  const key = options.idempotency_key ?? null;
  if (key !== null) requireId(key, "idempotency_key");

  const reservation = await getReservationOrThrow(budgets, reservationId);
  const amount = readStoredMoney(
    reservation.amount_usd,
    `reservation ${JSON.stringify(reservationId)} amount_usd`,
  );
  // A keyless repeat counts as a replay too: releasing moves no spending, so there is no double
  // count to guard against, only a caller that retried.
  if (reservation.status === "RELEASED" && reservation.idempotency_key === key) {
    return { reservation, released_usd: amount, replayed: true };
  }
  if (reservation.status !== "PENDING") throw alreadyResolved(reservation, "release");

  await adjustChain(budgets, await loadAccounts(budgets, reservation), options.nowNs, {
    reserved: amount.neg(),
  });
  const released: Reservation = {
    ...reservation,
    status: "RELEASED",
    idempotency_key: key,
    resolved_ns: options.nowNs,
  };
  await budgets.updateReservation(released);
  return { reservation: released, released_usd: amount, replayed: false };
}

async function getReservationOrThrow(budgets: BudgetStore, reservationId: string): Promise<Reservation> {
  const reservation = await budgets.getReservation(reservationId);
  if (reservation === null) {
    throw new BudgetGuardError(
      "reservation_not_found",
      `reservation ${JSON.stringify(reservationId)} does not exist`,
    );
  }
  return reservation;
}

function alreadyResolved(reservation: Reservation, operation: "settle" | "release"): AlreadyResolvedError {
  const status = reservation.status as Exclude<ReservationStatus, "PENDING">;
  const sameOperation = status === (operation === "settle" ? "SETTLED" : "RELEASED");
  const hint = sameOperation ? " (with another idempotency key)" : "";
  return new AlreadyResolvedError(
    reservation.reservation_id,
    status,
    `cannot ${operation} reservation ${JSON.stringify(reservation.reservation_id)}: already ${status}${hint}`,
  );
}

/** The accounts a hold was charged to, in the stored (child → root) order, each read and locked. */
export async function loadAccounts(budgets: BudgetStore, reservation: Reservation): Promise<BudgetAccount[]> {
  const accounts: BudgetAccount[] = [];
  for (const accountId of reservation.account_ids) {
    const account = await budgets.getAccount(accountId);
    if (account === null) {
      throw new BudgetGuardError(
        "corrupt",
        `reservation ${JSON.stringify(reservation.reservation_id)} is charged to account ${JSON.stringify(accountId)}, which does not exist`,
      );
    }
    accounts.push(account);
  }
  return accounts;
}

/**
 * Applies one change to every account of a chain and writes each back. Every new value is computed
 * before the first write, so a corrupt or overflowing account fails the call before anything is
 * written (the transaction would roll it back anyway; this keeps the store calls clean).
 */
export async function adjustChain(
  budgets: BudgetStore,
  chain: readonly BudgetAccount[],
  nowNs: number,
  delta: { reserved?: Money; spent?: Money },
): Promise<BudgetAccount[]> {
  const updated = adjustedChain(chain, nowNs, delta);
  // Every row is locked already (read through the store): the updates can go out together.
  await Promise.all(updated.map((account) => budgets.updateAccount(account)));
  return updated;
}

/** The chain's accounts with `delta` applied (no writes). */
function adjustedChain(
  chain: readonly BudgetAccount[],
  nowNs: number,
  delta: { reserved?: Money; spent?: Money },
): BudgetAccount[] {
  return chain.map((account) => {
    const next: BudgetAccount = { ...account, updated_ns: Math.max(account.updated_ns, nowNs) };
    if (delta.reserved !== undefined) {
      const reserved = addMoney(storedAmount(account, "reserved_usd"), delta.reserved);
      if (reserved.isNegative() && !reserved.isZero()) {
        throw new BudgetGuardError(
          "corrupt",
          `account ${JSON.stringify(account.account_id)} would hold a negative reservation total`,
        );
      }
      next.reserved_usd = moneyString(reserved);
    }
    if (delta.spent !== undefined) {
      next.spent_usd = moneyString(addMoney(storedAmount(account, "spent_usd"), delta.spent));
    }
    return next;
  });
}
