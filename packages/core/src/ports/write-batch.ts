// The port's batch calls (SubstrateTx.writeBatch, NonceStore.hasEach) written as the single calls they
// stand for, in order: the reference semantics, and the implementation of stores for which one
// statement a row costs nothing extra. Not a speed trick: stores that can send a kind as one
// statement (PostgreSQL) write their own.

import type { Nonce } from "../types.js";
import type { NonceStore, SubstrateTx, WriteBatch } from "./substrate.js";

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
  for (const message of batch.messages ?? []) await stores.messages.insert(message);
}

/** NonceStore.hasEach as one `has` after another. */
export async function hasEachByOne(
  nonces: Pick<NonceStore, "has">,
  pairs: ReadonlyArray<{ sessionId: string; nonce: Nonce }>,
): Promise<boolean[]> {
  const spent: boolean[] = [];
  for (const { sessionId, nonce } of pairs) spent.push(await nonces.has(sessionId, nonce));
  return spent;
}
