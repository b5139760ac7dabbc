// What one group-commit batch's transactions hand on to the next: the rows they hold locked.
// Plain data shared by tx.ts and the stores; it sends no statement and takes no lock itself.

import type { BudgetAccount, ChainEntryRecord, SessionRecord } from "@leash/core";

/**
 * A session row as a batch holds it (locked): config and state as JSON text, so that every reader is
 * handed objects of its own, as a fresh read would give it.
 */
export interface SessionEntry {
  readonly fields: Omit<SessionRecord, "config" | "state">;
  readonly config: string;
  readonly state: string;
}

/**
 * What the transactions of one group-commit batch hand on to the next: rows they read FOR UPDATE (or
 * wrote) as they now stand, locked by the batch's PostgreSQL transaction until its COMMIT, so the
 * next one can skip reading them again. Only a transaction that succeeded adds to it (one that
 * failed is rolled back to its savepoint, or had sent nothing and its held writes are dropped); it
 * dies with the batch.
 */
export interface BatchMemory {
  /** Budget accounts as they stand, each locked; emptied and refilled from every released transaction. */
  readonly accounts: Map<string, BudgetAccount>;
  readonly heldAccounts: Set<string>;
  /** The chain head as it stands (locked), null for an empty chain, undefined when not known. */
  head: { seq: number; entry_hash: string } | null | undefined;
  /** The entry `head` names, when known (appended by a released transaction). */
  headEntry: ChainEntryRecord | null;
  /** Session rows as they stand, each locked, left by a released transaction. */
  readonly sessions: Map<string, SessionEntry>;
  /**
   * Whether a (session, nonce) pair is recorded (key: nonceKey), as a released transaction found or
   * recorded it. The batch lock keeps every other Leash transaction on the schema out until COMMIT,
   * so no one else can record one meanwhile.
   */
  readonly nonces: Map<string, boolean>;
}

export function newBatchMemory(): BatchMemory {
  return {
    accounts: new Map(),
    heldAccounts: new Set(),
    head: undefined,
    headEntry: null,
    sessions: new Map(),
    nonces: new Map(),
  };
}
