// SubstrateTx.writeBatch written as the single calls it stands for, in the port's order: the reference
// semantics, and the implementation of stores for which one statement a row costs nothing extra.
// It is not a speed trick: stores that can send a kind as one statement (PostgreSQL) write their own.

import type { SubstrateTx, WriteBatch } from "./substrate.js";

/** Writes `batch` through `stores` row by row; rejects with the first failing call's error. */
export async function writeBatchByRows(
  stores: Omit<SubstrateTx, "writeBatch">,
  batch: WriteBatch,
): Promise<void> {
  for (const entry of batch.entries) await stores.chain.append(entry);
  for (const item of batch.outbox) await stores.outbox.enqueue(item);
  for (const reservation of batch.reservations) await stores.budgets.insertReservation(reservation);
  for (const session of batch.sessions) await stores.sessions.update(session);
  for (const account of batch.accounts) await stores.budgets.updateAccount(account);
}
