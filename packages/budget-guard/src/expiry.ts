// Expiry of holds whose agent never reported back: the estimate stays spent (money is never given
// back on silence). Runs inside the caller's transaction; recording each expiry is the caller's job.
import type { BudgetStore, Reservation, SubstrateTx } from "@leash/core";
import { readStoredMoney } from "./money.js";
import { adjustChain, loadAccounts } from "./reservations.js";
import { budgetsOf, requireCount, requireTimestamp } from "./validate.js";

/**
 * Charges the PENDING holds whose TTL has passed (at most `limit`, oldest first): on every account
 * a hold was charged to, `reserved` drops by the estimate and `spent` grows by it. Each becomes
 * EXPIRED with `actual_usd` set to the estimate charged, which tells a later `settle` to correct
 * the charge to the actual rather than add the actual on top. A hold is only placed for an ALLOWed
 * call, which may have run: releasing it on silence would let a crashed or silent agent spend the
 * same money twice. Returns the charged reservations so the caller can record each one.
 */
export function chargeExpired(
  tx: SubstrateTx | BudgetStore,
  nowNs: number,
  limit: number,
): Promise<Reservation[]> {
  return resolveExpired(tx, nowNs, limit, "charge");
}

/**
 * Gives back the holds of PENDING reservations whose TTL has passed (at most `limit` of them, oldest
 * first) and marks them EXPIRED. The engine no longer releases on silence (it uses `chargeExpired`);
 * this stays for replaying chains whose `reservation_expired` entries gave the hold back.
 * Returns the expired reservations so the caller can record each one (in the audit chain); a later
 * settle of one of them still spends its actual (see `settle`), a release fails with
 * `already_resolved` and status EXPIRED.
 */
export function expire(tx: SubstrateTx | BudgetStore, nowNs: number, limit: number): Promise<Reservation[]> {
  return resolveExpired(tx, nowNs, limit, "release");
}

async function resolveExpired(
  tx: SubstrateTx | BudgetStore,
  nowNs: number,
  limit: number,
  how: "charge" | "release",
): Promise<Reservation[]> {
  const budgets = budgetsOf(tx);
  requireTimestamp(nowNs, "nowNs");
  requireCount(limit, "limit", 1);

  const done: Reservation[] = [];
  for (const candidate of await budgets.listExpired(nowNs, limit)) {
    // The list is a snapshot; re-read (and so lock) each one, and skip any that a concurrent
    // settle or release resolved in between.
    const reservation = await budgets.getReservation(candidate.reservation_id);
    if (reservation === null || reservation.status !== "PENDING" || reservation.expires_ns > nowNs) continue;
    const amount = readStoredMoney(
      reservation.amount_usd,
      `reservation ${JSON.stringify(reservation.reservation_id)} amount_usd`,
    );
    const accounts = await loadAccounts(budgets, reservation);
    const resolved: Reservation = { ...reservation, status: "EXPIRED", resolved_ns: nowNs };
    if (how === "charge") {
      await adjustChain(budgets, accounts, nowNs, { reserved: amount.neg(), spent: amount });
      resolved.actual_usd = reservation.amount_usd;
    } else {
      await adjustChain(budgets, accounts, nowNs, { reserved: amount.neg() });
    }
    await budgets.updateReservation(resolved);
    done.push(resolved);
  }
  return done;
}
