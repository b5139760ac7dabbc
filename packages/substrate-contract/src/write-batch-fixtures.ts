// Shared rows and checks of the writeBatch contract sections: the batch the engine would write, what a
// test can observe of it, and the refusal check. It registers no tests itself.

import type {
  BudgetAccount,
  ChainEntryRecord,
  Nonce,
  OutboxItem,
  SessionRecord,
  Substrate,
  SubstrateErrorCode,
  SubstrateTx,
  WriteBatch,
} from "@leash/core";
import { expect } from "vitest";
import {
  GENESIS_PREV_HASH,
  makeAccount,
  makeChainEntry,
  makeReservation,
  outboxItemFor,
  seedWorld,
  WORLD,
} from "./fixtures.js";
import { byKey, expectSubstrateError, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

export const { session1: S1, session2: S2 } = WORLD;
export const ACCOUNTS = [WORLD.orgAccount, WORLD.agentAccount, WORLD.sessionAccount] as const;
/** An account a failing transaction inserts before its batch: it must be gone with the batch. */
export const EXTRA_ACCOUNT = "acct-extra";

export const EMPTY: WriteBatch = { entries: [], outbox: [], reservations: [], sessions: [], accounts: [] };

export type Head = { seq: number; entry_hash: string } | null;

/** What an entry spends: its session (null: none) and its nonce, if any. */
export interface Spend {
  session: string | null;
  nonce?: Nonce;
}

/** Contiguous, linked entries after `head`, one per spend. */
export function entriesAfter(head: Head, spends: readonly Spend[]): ChainEntryRecord[] {
  const entries: ChainEntryRecord[] = [];
  for (const { session, nonce } of spends) {
    const prev = entries.at(-1) ?? head;
    entries.push(
      makeChainEntry(prev === null ? 0 : prev.seq + 1, prev?.entry_hash ?? GENESIS_PREV_HASH, {
        session_id: session,
        ...(nonce === undefined ? {} : { nonce }),
      }),
    );
  }
  return entries;
}

export const headOf = (entry: ChainEntryRecord) => ({ seq: entry.seq, entry_hash: entry.entry_hash });

/** The outbox item `outbox.list` gives back for a freshly queued entry. */
export function queuedFor(entry: ChainEntryRecord): OutboxItem {
  return {
    ...outboxItemFor(entry),
    status: "PENDING",
    attempts: 0,
    claimed_by: null,
    lease_until_ns: null,
    last_error: null,
  };
}

/** A session row moved on by one call, stamped with `atSeq`. */
export function bumpSession(row: SessionRecord, atSeq: number | null): SessionRecord {
  return {
    ...row,
    call_count: row.call_count + 1,
    updated_ns: row.updated_ns + 1,
    state: { ...row.state, total_calls: (row.state.total_calls ?? 0) + 1, last_tool_name: "fetch" },
    at_seq: atSeq,
  };
}

/** An account row with one more hold of $0.25 on it, stamped with `atSeq`. */
export function bumpAccount(row: BudgetAccount, atSeq: number | null): BudgetAccount {
  return {
    ...row,
    reserved_usd: String(Number(row.reserved_usd) + 0.25),
    updated_ns: row.updated_ns + 1,
    at_seq: atSeq,
  };
}

/**
 * What the engine writes for `spends` after the head it reads in `tx`: the entries, their outbox items, one
 * hold tagged `tag`, and S1's and the session account's rows moved on. Reads the rows first, as the engine does.
 */
export async function batchIn(tx: SubstrateTx, spends: readonly Spend[], tag: string): Promise<WriteBatch> {
  const entries = entriesAfter(await tx.chain.head(), spends);
  const atSeq = entries.at(-1)?.seq ?? null;
  const session = (await tx.sessions.get(S1))!;
  const account = (await tx.budgets.getAccount(WORLD.sessionAccount))!;
  return {
    entries,
    outbox: entries.map(outboxItemFor),
    reservations: [makeReservation(`r-${tag}`, { call_number: session.call_count + 1 })],
    sessions: [bumpSession(session, atSeq)],
    accounts: [bumpAccount(account, atSeq)],
  };
}

/** Everything a test can observe of what a batch writes, read in one transaction. */
export function contents(sub: Substrate) {
  return sub.transaction(async (tx) => ({
    head: await tx.chain.head(),
    count: await tx.chain.count(),
    chain: await tx.chain.range(0, 1_000),
    outbox: await tx.outbox.list({}),
    reservations: byKey(await tx.budgets.listReservations({}), (r) => r.reservation_id),
    sessions: byKey(await tx.sessions.list(), (s) => s.session_id),
    accounts: await Promise.all([...ACCOUNTS, EXTRA_ACCOUNT].map((id) => tx.budgets.getAccount(id))),
    nonces: [await tx.nonces.count(S1), await tx.nonces.count(S2)],
  }));
}

/**
 * Runs `build`'s batch in a transaction that reads the rows, inserts an account of its own and then lets
 * writeBatch's rejection out of `fn`; asserts the rejection, and that nothing of the transaction was kept.
 */
export async function expectRefused(
  sub: Substrate,
  build: (tx: SubstrateTx) => Promise<WriteBatch>,
  expected: SubstrateErrorCode | "TypeError",
): Promise<void> {
  const before = await contents(sub);
  const run = sub.transaction(async (tx) => {
    const batch = await build(tx);
    for (const s of batch.sessions) await tx.sessions.get(s.session_id);
    for (const a of batch.accounts) await tx.budgets.getAccount(a.account_id);
    await tx.budgets.insertAccount(makeAccount(EXTRA_ACCOUNT));
    await tx.writeBatch(batch);
  });
  if (expected === "TypeError") {
    const outcome = await run.then(
      () => "resolved",
      (error: unknown) => error,
    );
    expect(outcome).toBeInstanceOf(TypeError);
  } else {
    await expectSubstrateError(run, expected);
  }
  expect(await contents(sub)).toEqual(before);
}

/** A migrated store with the seeded world and two committed entries (S1 spent "n-old"), queued, and a hold. */
export async function seeded(opts: SubstrateContractOptions): Promise<Substrate> {
  const sub = await (await useHarness(opts)).openMigrated();
  await seedWorld(sub);
  await sub.transaction(async (tx) =>
    tx.writeBatch(await batchIn(tx, [{ session: S1, nonce: "n-old" }, { session: null }], "old")),
  );
  return sub;
}
