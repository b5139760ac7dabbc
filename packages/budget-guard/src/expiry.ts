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
export async function chargeExpired(
  tx: SubstrateTx | BudgetStore,
  nowNs: number,
  limit: number,
): Promise<Reservation[]> {
  const budgets = budgetsOf(tx);
  requireTimestamp(nowNs, "nowNs");
  requireCount(limit, "limit", 1);

  const charged: Reservation[] = [];
  for (const candidate of await budgets.listExpired(nowNs, limit)) {
    // The list is a snapshot; re-read (and so lock) each one, and skip any that a concurrent
    // settle or release resolved in between.
    const reservation = await budgets.getReservation(candidate.reservation_id);
    if (reservation === null || reservation.status !== "PENDING" || reservation.expires_ns > nowNs) continue;
    const amount = readStoredMoney(
      reservation.amount_usd,
      `reservation ${JSON.stringify(reservation.reservation_id)} amount_usd`,
    );
    await adjustChain(budgets, await loadAccounts(budgets, reservation), nowNs, {
      reserved: amount.neg(),
      spent: amount,
    });
    const done: Reservation = {
      ...reservation,
      status: "EXPIRED",
      actual_usd: reservation.amount_usd,
      resolved_ns: nowNs,
    };
    await budgets.updateReservation(done);
    charged.push(done);
  }
  return charged;
}
