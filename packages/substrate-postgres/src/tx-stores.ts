// One transaction's stores on a TxContext, and its writeBatch: each row goes out through the store it
// belongs to. The transaction itself (BEGIN, savepoints, COMMIT) is substrate.ts's and batch-run.ts's.

import type { SubstrateTx } from "@leash/core";
import { type AllotmentStatements, PostgresAllotmentStore } from "./allotments.js";
import type { BatchMemory } from "./batch-memory.js";
import { PostgresBudgetStore } from "./budgets.js";
import { PostgresChainStore } from "./chain.js";
import { PostgresHitlStore } from "./hitl.js";
import { type MessageStatements, PostgresMessageStore } from "./messages.js";
import { PostgresNonceStore } from "./nonces.js";
import { PostgresOutboxStore } from "./outbox.js";
import { PostgresSessionStore } from "./sessions.js";
import type { Statements } from "./sql.js";
import type { TxContext } from "./tx.js";

/** The stores of one batched transaction, which can hand what they know to the next one. */
export interface Remembering {
  rememberIn(memory: BatchMemory): void;
}

/** Every statement the stores run, built once per schema. */
export interface StoreStatements {
  readonly sql: Statements;
  readonly messages: MessageStatements;
  readonly allotments: AllotmentStatements;
}

export function txStores(
  ctx: TxContext,
  statements: StoreStatements,
  memory?: BatchMemory,
): SubstrateTx & Remembering {
  const budgets = new PostgresBudgetStore(ctx, statements.sql.accounts, statements.sql.reservations, memory);
  const nonces = new PostgresNonceStore(ctx, statements.sql.nonces, memory);
  const chain = new PostgresChainStore(ctx, statements.sql.chain, nonces, memory);
  const appended = (seq: number) => chain.appendedSeqs.has(seq);
  const sessions = new PostgresSessionStore(ctx, statements.sql.sessions, memory);
  const outbox = new PostgresOutboxStore(ctx, statements.sql.outbox, appended);
  const messages = new PostgresMessageStore(ctx, statements.messages);
  const allotments = new PostgresAllotmentStore(ctx, statements.allotments);
  return {
    allotments,
    sessions,
    nonces,
    budgets,
    hitl: new PostgresHitlStore(ctx, statements.sql.hitl),
    chain,
    outbox,
    messages,
    // Every row goes out without waiting (held back, on a pipelined connection, to go out a kind
    // at a time: BatchWrites), then every answer is waited for, so it fails here, not at COMMIT.
    writeBatch: async (batch) => {
      for (const entry of batch.entries) {
        if (entry.nonce !== undefined && entry.nonce !== null && entry.session_id === null) {
          throw new TypeError("a chain entry with a nonce needs a session_id");
        }
      }
      const sent: Promise<void>[] = [];
      for (const entry of batch.entries) sent.push(chain.appendHeld(entry));
      for (const item of batch.outbox) sent.push(outbox.enqueueHeld(item));
      for (const reservation of batch.reservations) sent.push(budgets.insertReservationHeld(reservation));
      for (const session of batch.sessions) sent.push(sessions.updateHeld(session));
      for (const account of batch.accounts) sent.push(budgets.updateAccountHeld(account));
      if (batch.messages !== undefined) sent.push(messages.insertMany(batch.messages));
      await Promise.all(sent);
      await ctx.settleWrites("writeBatch");
    },
    rememberIn: (into) => {
      budgets.rememberIn(into);
      chain.rememberIn(into);
      sessions.rememberIn(into);
      nonces.rememberIn(into);
    },
  };
}
