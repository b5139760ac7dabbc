// Contract tests for SubstrateTx.writeBatch: one call that writes entries, outbox items, holds, sessions and
// accounts exactly as the single calls would, in the port's order. How a store sends them is not checked.

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
import { describe, expect, it } from "vitest";
import {
  chainEntryId,
  GENESIS_PREV_HASH,
  makeAccount,
  makeChainEntry,
  makeReservation,
  makeSession,
  outboxItemFor,
  seedWorld,
  T0,
  WORLD,
} from "./fixtures.js";
import { byKey, expectSubstrateError, twoHandles, useHarness } from "./harness.js";
import { spend } from "./nonces.js";
import type { SubstrateContractOptions } from "./options.js";
import { STAMPS } from "./stamps.js";

const { session1: S1, session2: S2 } = WORLD;
const ACCOUNTS = [WORLD.orgAccount, WORLD.agentAccount, WORLD.sessionAccount] as const;
/** An account a failing transaction inserts before its batch: it must be gone with the batch. */
const EXTRA_ACCOUNT = "acct-extra";

const EMPTY: WriteBatch = { entries: [], outbox: [], reservations: [], sessions: [], accounts: [] };

type Head = { seq: number; entry_hash: string } | null;

/** What an entry spends: its session (null: none) and its nonce, if any. */
interface Spend {
  session: string | null;
  nonce?: Nonce;
}

/** Contiguous, linked entries after `head`, one per spend. */
function entriesAfter(head: Head, spends: readonly Spend[]): ChainEntryRecord[] {
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

const headOf = (entry: ChainEntryRecord) => ({ seq: entry.seq, entry_hash: entry.entry_hash });

/** The outbox item `outbox.list` gives back for a freshly queued entry. */
function queuedFor(entry: ChainEntryRecord): OutboxItem {
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
function bumpSession(row: SessionRecord, atSeq: number | null): SessionRecord {
  return {
    ...row,
    call_count: row.call_count + 1,
    updated_ns: row.updated_ns + 1,
    state: { ...row.state, total_calls: (row.state.total_calls ?? 0) + 1, last_tool_name: "fetch" },
    at_seq: atSeq,
  };
}

/** An account row with one more hold of $0.25 on it, stamped with `atSeq`. */
function bumpAccount(row: BudgetAccount, atSeq: number | null): BudgetAccount {
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
async function batchIn(tx: SubstrateTx, spends: readonly Spend[], tag: string): Promise<WriteBatch> {
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
function contents(sub: Substrate) {
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
async function expectRefused(
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
async function seeded(opts: SubstrateContractOptions): Promise<Substrate> {
  const sub = await (await useHarness(opts)).openMigrated();
  await seedWorld(sub);
  await sub.transaction(async (tx) =>
    tx.writeBatch(await batchIn(tx, [{ session: S1, nonce: "n-old" }, { session: null }], "old")),
  );
  return sub;
}

export function writeBatchContract(opts: SubstrateContractOptions): void {
  describe("writeBatch", () => {
    it("a full batch reads back exactly as written, and as the same single calls write it", async () => {
      const [a, b] = await twoHandles(await useHarness(opts));
      const single = await (await useHarness(opts)).openMigrated();
      await seedWorld(a);
      await seedWorld(single);
      const rows = await a.transaction(async (tx) => ({
        sessions: [(await tx.sessions.get(S1))!, (await tx.sessions.get(S2))!],
        accounts: await Promise.all(ACCOUNTS.map(async (id) => (await tx.budgets.getAccount(id))!)),
      }));
      const entries = entriesAfter(null, [
        { session: S1, nonce: "n-a" },
        { session: S1 },
        { session: S2, nonce: 7 },
        { session: null },
        { session: S1, nonce: 7 },
      ]);
      const batch: WriteBatch = {
        entries,
        outbox: entries.map(outboxItemFor),
        reservations: [
          makeReservation("r-1", { call_number: 4 }),
          makeReservation("r-2", {
            session_id: S2,
            account_ids: [WORLD.orgAccount],
            call_number: 1,
            amount_usd: "0.001",
            idempotency_key: "k-2",
          }),
        ],
        sessions: rows.sessions.map((s) => bumpSession(s, 4)),
        accounts: rows.accounts.map((acct) => bumpAccount(acct, 4)),
      };
      await a.transaction((tx) => tx.writeBatch(batch));
      await single.transaction(async (tx) => {
        for (const entry of batch.entries) await tx.chain.append(entry);
        for (const item of batch.outbox) await tx.outbox.enqueue(item);
        for (const hold of batch.reservations) await tx.budgets.insertReservation(hold);
        for (const session of batch.sessions) await tx.sessions.update(session);
        for (const account of batch.accounts) await tx.budgets.updateAccount(account);
      });

      for (const sub of [a, b]) {
        const back = await sub.transaction(async (tx) => ({
          head: await tx.chain.head(),
          count: await tx.chain.count(),
          chain: await tx.chain.range(0, 100),
          outbox: await tx.outbox.list({}),
          reservations: [await tx.budgets.getReservation("r-1"), await tx.budgets.getReservation("r-2")],
          sessions: [await tx.sessions.get(S1), await tx.sessions.get(S2)],
          accounts: await Promise.all(ACCOUNTS.map((id) => tx.budgets.getAccount(id))),
          spent: [
            await tx.nonces.has(S1, "n-a"),
            await tx.nonces.has(S2, 7),
            await tx.nonces.has(S1, 7),
            await tx.nonces.has(S2, "7"),
            await tx.nonces.has(S2, "n-a"),
          ],
          nonces: [await tx.nonces.count(S1), await tx.nonces.count(S2)],
        }));
        expect(back).toEqual({
          head: headOf(entries[4]!),
          count: 5,
          chain: entries,
          outbox: entries.map(queuedFor),
          reservations: batch.reservations,
          sessions: batch.sessions,
          accounts: batch.accounts,
          spent: [true, true, true, false, false],
          nonces: [2, 1],
        });
        expect(back.chain.map((e) => e.nonce ?? null)).toEqual(["n-a", null, 7, null, 7]);
        expect(typeof back.chain[2]?.nonce).toBe("number");
      }
      expect(await contents(a)).toEqual(await contents(single));
    });

    it("entries continue the head: after an earlier batch, after a single append, and after a batch of the same transaction", async () => {
      const sub = await seeded(opts);
      const first = (await sub.transaction((tx) => tx.chain.range(0, 10))).map((e) => e.seq);
      expect(first).toEqual([0, 1]);
      await sub.transaction(async (tx) =>
        tx.writeBatch(await batchIn(tx, [{ session: S1 }, { session: S2 }], "later")),
      );
      await sub.transaction(async (tx) => {
        await tx.chain.append(entriesAfter(await tx.chain.head(), [{ session: null }])[0]!);
        await tx.writeBatch(await batchIn(tx, [{ session: S1, nonce: "n-x" }], "after-append"));
        await tx.writeBatch(await batchIn(tx, [{ session: S2, nonce: "n-x" }], "after-batch"));
      });
      const chain = await sub.transaction((tx) => tx.chain.range(0, 100));
      expect(chain.map((e) => e.seq)).toEqual([0, 1, 2, 3, 4, 5, 6]);
      for (const [i, entry] of chain.entries()) {
        expect(entry.prev_hash, `prev link of seq ${i}`).toBe(
          i === 0 ? GENESIS_PREV_HASH : chain[i - 1]!.entry_hash,
        );
      }
      const after = await sub.transaction(async (tx) => ({
        head: await tx.chain.head(),
        outbox: (await tx.outbox.list({})).map((item) => item.seq),
        holds: byKey(await tx.budgets.listReservations({}), (r) => r.reservation_id).map(
          (r) => r.reservation_id,
        ),
        session: (await tx.sessions.get(S1))?.at_seq,
      }));
      expect(after).toEqual({
        head: headOf(chain[6]!),
        outbox: [0, 1, 2, 3, 5, 6],
        holds: ["r-after-append", "r-after-batch", "r-later", "r-old"],
        session: 6,
      });
    });

    it('an entry whose seq is not head + 1 (a gap, a taken seq, a taken entry id) fails with "conflict"; nothing is kept', async () => {
      const sub = await seeded(opts);
      // A gap after a good first entry.
      await expectRefused(
        sub,
        async (tx) => {
          const batch = await batchIn(tx, [{ session: S1 }, { session: S1 }], "gap");
          const [good, next] = batch.entries;
          const gap = makeChainEntry(next!.seq + 1, good!.entry_hash);
          return { ...batch, entries: [good!, gap], outbox: [good!, gap].map(outboxItemFor) };
        },
        "conflict",
      );
      // The first entry of the batch is not the one after the head.
      await expectRefused(
        sub,
        async (tx) => {
          const batch = await batchIn(tx, [{ session: S1 }], "skip");
          const skipped = makeChainEntry(batch.entries[0]!.seq + 1, batch.entries[0]!.entry_hash);
          return { ...batch, entries: [skipped], outbox: [outboxItemFor(skipped)] };
        },
        "conflict",
      );
      // A committed seq taken again (by a rival with an id of its own).
      await expectRefused(
        sub,
        async (tx) => {
          const batch = await batchIn(tx, [{ session: S1 }], "taken");
          const rival = makeChainEntry(1, GENESIS_PREV_HASH, {
            entry_id: chainEntryId(1001),
            body: '{"r":1}',
          });
          return { ...batch, entries: [rival], outbox: [{ ...outboxItemFor(rival), seq: 2 }] };
        },
        "conflict",
      );
      // The batch's own seq twice.
      await expectRefused(
        sub,
        async (tx) => {
          const batch = await batchIn(tx, [{ session: S1 }], "twice");
          const [good] = batch.entries;
          const rival = { ...good!, entry_id: chainEntryId(1002) };
          return { ...batch, entries: [good!, rival], outbox: [outboxItemFor(good!)] };
        },
        "conflict",
      );
      // The right seq with a taken entry id.
      await expectRefused(
        sub,
        async (tx) => {
          const batch = await batchIn(tx, [{ session: S1 }], "same-id");
          const sameId = { ...batch.entries[0]!, entry_id: chainEntryId(0) };
          return { ...batch, entries: [sameId], outbox: [outboxItemFor(sameId)] };
        },
        "conflict",
      );
      // The refused batches took nothing: the next seq is still free.
      await sub.transaction(async (tx) => tx.writeBatch(await batchIn(tx, [{ session: S1 }], "next")));
      expect((await sub.transaction((tx) => tx.chain.head()))?.seq).toBe(2);
    });

    it('a nonce the session spent already, or twice in one batch, fails with "conflict"; nothing is kept', async () => {
      const sub = await seeded(opts);
      await spend(sub, S2, "n-s2");
      // Spent by a committed entry of the session (seeded: S1 spent "n-old").
      await expectRefused(
        sub,
        (tx) =>
          batchIn(
            tx,
            [{ session: S1, nonce: "n-fresh" }, { session: S1 }, { session: S1, nonce: "n-old" }],
            "old",
          ),
        "conflict",
      );
      await expectRefused(sub, (tx) => batchIn(tx, [{ session: S2, nonce: "n-s2" }], "s2"), "conflict");
      // Twice in the batch, for the same session.
      await expectRefused(
        sub,
        (tx) =>
          batchIn(
            tx,
            [{ session: S1, nonce: "n-dup" }, { session: null }, { session: S1, nonce: "n-dup" }],
            "dup",
          ),
        "conflict",
      );
      await expectRefused(
        sub,
        (tx) =>
          batchIn(
            tx,
            [
              { session: S2, nonce: 9 },
              { session: S2, nonce: 9 },
            ],
            "dup-number",
          ),
        "conflict",
      );
      expect(
        await sub.transaction(async (tx) => [
          await tx.nonces.has(S1, "n-fresh"),
          await tx.nonces.has(S1, "n-dup"),
          await tx.nonces.has(S2, 9),
        ]),
      ).toEqual([false, false, false]);
    });

    it('one nonce in two sessions, and the number 7 beside the string "7", are different spends', async () => {
      const sub = await seeded(opts);
      await sub.transaction(async (tx) =>
        tx.writeBatch(
          await batchIn(
            tx,
            [
              { session: S1, nonce: "shared" },
              { session: S2, nonce: "shared" },
              { session: S1, nonce: 7 },
              { session: S1, nonce: "7" },
              { session: S2, nonce: "n-old" },
            ],
            "distinct",
          ),
        ),
      );
      const seen = await sub.transaction(async (tx) => ({
        nonces: [await tx.nonces.count(S1), await tx.nonces.count(S2)],
        spent: [
          await tx.nonces.has(S1, "shared"),
          await tx.nonces.has(S2, "shared"),
          await tx.nonces.has(S1, 7),
          await tx.nonces.has(S1, "7"),
          await tx.nonces.has(S2, 7),
          await tx.nonces.has(S2, "n-old"),
        ],
        kinds: (await tx.chain.range(2, 10)).map((e) => typeof e.nonce),
      }));
      expect(seen).toEqual({
        nonces: [4, 2],
        spent: [true, true, true, true, false, true],
        kinds: ["string", "string", "number", "string", "string"],
      });
      // Both 7s are spent now, each on its own.
      await expectRefused(sub, (tx) => batchIn(tx, [{ session: S1, nonce: 7 }], "seven"), "conflict");
      await expectRefused(sub, (tx) => batchIn(tx, [{ session: S1, nonce: "7" }], "seven-text"), "conflict");
    });

    it("an entry with a nonce but no session is refused with a TypeError; nothing is kept", async () => {
      const sub = await seeded(opts);
      await expectRefused(
        sub,
        async (tx) => {
          const batch = await batchIn(tx, [{ session: S1, nonce: "n-ok" }, { session: null }], "orphan");
          const [ok, orphan] = batch.entries;
          return { ...batch, entries: [ok!, { ...orphan!, nonce: "n-orphan" }] };
        },
        "TypeError",
      );
      expect(await sub.transaction((tx) => tx.nonces.has(S1, "n-ok"))).toBe(false);
    });

    it('a queued outbox seq or a taken hold id fails with "conflict", a missing session or account with "not_found"; nothing is kept', async () => {
      const sub = await seeded(opts);
      type Batch = Awaited<ReturnType<typeof batchIn>>;
      // Each a good batch of S1 with one thing wrong: what it names, how, and the code it must fail with.
      const cases: Array<[string, (batch: Batch) => Batch, SubstrateErrorCode]> = [
        // Seq 0 is queued already (seeded), and a seq twice in the batch.
        [
          "queued",
          (b) => ({ ...b, outbox: [...b.outbox, outboxItemFor(makeChainEntry(0, GENESIS_PREV_HASH))] }),
          "conflict",
        ],
        ["queued-twice", (b) => ({ ...b, outbox: [b.outbox[0]!, b.outbox[0]!] }), "conflict"],
        // "r-old" is held already (seeded), and a hold id twice in the batch.
        [
          "fresh",
          (b) => ({ ...b, reservations: [...b.reservations, makeReservation("r-old", { amount_usd: "9" })] }),
          "conflict",
        ],
        ["held-twice", (b) => ({ ...b, reservations: [b.reservations[0]!, b.reservations[0]!] }), "conflict"],
        // A session or an account that does not exist, after rows that do.
        ["ghost-session", (b) => ({ ...b, sessions: [...b.sessions, makeSession("ghost")] }), "not_found"],
        [
          "ghost-account",
          (b) => ({ ...b, accounts: [...b.accounts, makeAccount("acct-ghost")] }),
          "not_found",
        ],
      ];
      for (const [label, spoil, code] of cases) {
        await expectRefused(sub, async (tx) => spoil(await batchIn(tx, [{ session: S1 }], label)), code);
      }
      const after = await sub.transaction(async (tx) => ({
        ghost: await tx.sessions.get("ghost"),
        account: await tx.budgets.getAccount("acct-ghost"),
      }));
      expect(after).toEqual({ ghost: null, account: null });
    });

    it("rejects with the error of the first failing call in the port's order: entries, outbox, holds, sessions, accounts", async () => {
      const sub = await seeded(opts);
      const ghostSession = makeSession("ghost");
      const ghostAccount = makeAccount("acct-ghost");
      // An orphan nonce (entries) before a queued seq (outbox).
      await expectRefused(
        sub,
        async (tx) => {
          const batch = await batchIn(tx, [{ session: null }], "order-1");
          return {
            ...batch,
            entries: [{ ...batch.entries[0]!, nonce: "n-orphan" }],
            outbox: [...batch.outbox, batch.outbox[0]!],
          };
        },
        "TypeError",
      );
      // A queued seq (outbox) before a missing session.
      await expectRefused(
        sub,
        async (tx) => {
          const batch = await batchIn(tx, [{ session: S1 }], "order-2");
          return { ...batch, outbox: [...batch.outbox, batch.outbox[0]!], sessions: [ghostSession] };
        },
        "conflict",
      );
      // A taken hold id before a missing session and account.
      await expectRefused(
        sub,
        async (tx) => {
          const batch = await batchIn(tx, [{ session: S1 }], "order-3");
          return {
            ...batch,
            reservations: [makeReservation("r-old")],
            sessions: [ghostSession],
            accounts: [ghostAccount],
          };
        },
        "conflict",
      );
      // A gap (entries) before a missing account.
      await expectRefused(
        sub,
        async (tx) => {
          const batch = await batchIn(tx, [{ session: S1 }], "order-4");
          const gap = makeChainEntry(batch.entries[0]!.seq + 5, GENESIS_PREV_HASH);
          return { ...batch, entries: [gap], accounts: [ghostAccount] };
        },
        "conflict",
      );
    });

    it("an empty batch resolves and changes nothing, on an empty chain and after entries", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const empty = await contents(sub);
      const inTx = await sub.transaction(async (tx) => {
        const result = await tx.writeBatch(EMPTY);
        return { result, head: await tx.chain.head(), count: await tx.chain.count() };
      });
      expect(inTx).toEqual({ result: undefined, head: null, count: 0 });
      expect(await contents(sub)).toEqual(empty);

      await seedWorld(sub);
      await sub.transaction(async (tx) =>
        tx.writeBatch(await batchIn(tx, [{ session: S1, nonce: 1 }], "one")),
      );
      const before = await contents(sub);
      await sub.transaction(async (tx) => {
        await tx.writeBatch({ entries: [], outbox: [], reservations: [], sessions: [], accounts: [] });
        expect(await tx.chain.head()).toEqual(before.head);
      });
      expect(await contents(sub)).toEqual(before);
      expect(before.count).toBe(1);
    });

    it("reads that follow in the same transaction see the whole batch, rows read before it included", async () => {
      const sub = await seeded(opts);
      const seen = await sub.transaction(async (tx) => {
        // Read first, as the engine does: a store may answer later reads from what it holds.
        const batch = await batchIn(
          tx,
          [
            { session: S1, nonce: "n-in" },
            { session: S2, nonce: "n-in" },
          ],
          "in",
        );
        await tx.sessions.get(S2);
        await tx.budgets.getReservation("r-in");
        const s2 = bumpSession((await tx.sessions.get(S2))!, 3);
        const org = bumpAccount((await tx.budgets.getAccount(WORLD.orgAccount))!, 3);
        const written = { ...batch, sessions: [...batch.sessions, s2], accounts: [...batch.accounts, org] };
        await tx.writeBatch(written);
        return {
          written,
          head: await tx.chain.head(),
          count: await tx.chain.count(),
          chain: await tx.chain.range(2, 10),
          outbox: (await tx.outbox.list({})).map((i) => i.seq),
          hold: await tx.budgets.getReservation("r-in"),
          sessions: [await tx.sessions.get(S1), await tx.sessions.get(S2)],
          accounts: [
            await tx.budgets.getAccount(WORLD.sessionAccount),
            await tx.budgets.getAccount(WORLD.orgAccount),
          ],
          spent: [await tx.nonces.has(S1, "n-in"), await tx.nonces.has(S2, "n-in")],
          nonces: [await tx.nonces.count(S1), await tx.nonces.count(S2)],
        };
      });
      const { written } = seen;
      expect(seen).toEqual({
        written,
        head: headOf(written.entries[1]!),
        count: 4,
        chain: written.entries,
        outbox: [0, 1, 2, 3],
        hold: written.reservations[0],
        sessions: written.sessions,
        accounts: written.accounts,
        spent: [true, true],
        nonces: [2, 1],
      });
      // And the commit keeps what the transaction saw.
      const after = await sub.transaction(async (tx) => ({
        sessions: [await tx.sessions.get(S1), await tx.sessions.get(S2)],
        accounts: [
          await tx.budgets.getAccount(WORLD.sessionAccount),
          await tx.budgets.getAccount(WORLD.orgAccount),
        ],
      }));
      expect(after).toEqual({ sessions: written.sessions, accounts: written.accounts });
    });

    it("a batch's session rows leave the stored heartbeat as it is, as update does", async () => {
      const sub = await seeded(opts);
      await sub.transaction((tx) => tx.sessions.touch(S1, T0 + 9));
      const written = await sub.transaction(async (tx) => {
        const batch = await batchIn(tx, [{ session: S1 }], "beat");
        const row = { ...batch.sessions[0]!, last_heartbeat_ns: T0 + 1_000 };
        await tx.writeBatch({ ...batch, sessions: [row] });
        expect((await tx.sessions.get(S1))?.last_heartbeat_ns).toBe(T0 + 9);
        return row;
      });
      expect(await sub.transaction((tx) => tx.sessions.get(S1))).toEqual({
        ...written,
        last_heartbeat_ns: T0 + 9,
      });
    });

    it("at_seq stamps written through a batch's session and account rows come back as written (null and large)", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const sessions = STAMPS.map((at_seq, i) => makeSession(`s${i}`, { at_seq }));
      const accounts = STAMPS.map((at_seq, i) => makeAccount(`a${i}`, { at_seq }));
      await sub.transaction(async (tx) => {
        for (const s of sessions) await tx.sessions.insert(s);
        for (const a of accounts) await tx.budgets.insertAccount(a);
      });
      // Each stamp moves to the next one, the last back to null.
      const next = <T extends { at_seq: number | null }>(rows: T[]) =>
        rows.map((row, i) => ({ ...row, updated_ns: T0 + 5, at_seq: STAMPS[(i + 1) % STAMPS.length]! }));
      const movedSessions = next(sessions);
      const movedAccounts = next(accounts);
      const read = (tx: SubstrateTx) =>
        Promise.all([
          Promise.all(sessions.map((s) => tx.sessions.get(s.session_id))),
          Promise.all(accounts.map((a) => tx.budgets.getAccount(a.account_id))),
        ]);
      const inTx = await sub.transaction(async (tx) => {
        await read(tx);
        await tx.writeBatch({ ...EMPTY, sessions: movedSessions, accounts: movedAccounts });
        return read(tx);
      });
      expect(inTx).toEqual([movedSessions, movedAccounts]);
      const after = await sub.transaction(read);
      expect(after).toEqual([movedSessions, movedAccounts]);
      expect(after[0].map((s) => s?.at_seq)).toEqual([...STAMPS.slice(1), STAMPS[0]]);
      expect(after[1].map((a) => a?.at_seq)).toEqual([...STAMPS.slice(1), STAMPS[0]]);
    });

    it("mutating a batch's records after writeBatch changes nothing stored", async () => {
      const sub = await seeded(opts);
      const written = await sub.transaction(async (tx) => {
        const batch = await batchIn(tx, [{ session: S1, nonce: "n-m" }], "mutable");
        const kept = structuredClone(batch);
        await tx.writeBatch(batch);
        const entry = batch.entries[0]!;
        entry.body = "mutated";
        entry.nonce = "other";
        batch.reservations[0]!.amount_usd = "99";
        batch.sessions[0]!.call_count = 999;
        batch.accounts[0]!.spent_usd = "99";
        (batch.outbox[0] as { entry_id: string }).entry_id = "mutated";
        return kept;
      });
      const back = await sub.transaction(async (tx) => ({
        chain: await tx.chain.range(2, 10),
        outbox: (await tx.outbox.list({})).at(-1),
        hold: await tx.budgets.getReservation("r-mutable"),
        session: await tx.sessions.get(S1),
        account: await tx.budgets.getAccount(WORLD.sessionAccount),
      }));
      expect(back).toEqual({
        chain: written.entries,
        outbox: queuedFor(written.entries[0]!),
        hold: written.reservations[0],
        session: written.sessions[0],
        account: written.accounts[0],
      });
    });
  });
}
