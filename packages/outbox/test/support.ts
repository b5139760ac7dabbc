// Test support: the three real substrates (memory, SQLite on a temp file, PostgreSQL in a fresh schema)
// and plausible chain entries, from @leash/test-stores. Not shipped (outside src); nothing here is a mock.

import {
  entryAppender,
  openStore as openTestStore,
  type StoreKind,
  type TestStore,
} from "@leash/test-stores";
import { enqueueEntry } from "../src/outbox.js";

export { makeEntry, manualClock, STORE_KINDS as KINDS } from "@leash/test-stores";

/** One store, and as many handles on it as a test wants (two handles = two relays' connections). */
export type Store = TestStore;

// Group commit off: each test transaction commits alone, which is what the leases are about.
export const openStore = (kind: StoreKind): Promise<Store> =>
  openTestStore(kind, { label: "outbox", sqlite: { groupCommit: false }, postgres: { poolSize: 4 } });

/** Appends entries after the head and queues each with the outbox's own enqueueEntry, in one transaction. */
export const appendEntries = entryAppender(enqueueEntry);
