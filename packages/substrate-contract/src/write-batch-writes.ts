// writeBatch contract, the writes: a full batch reads back as the single calls write it, entries continue
// the head, an empty batch changes nothing. Refusals and reads inside the transaction are other sections.

import type { WriteBatch } from "@leash/core";
import { expect, it } from "vitest";
import { GENESIS_PREV_HASH, makeReservation, outboxItemFor, seedWorld, WORLD } from "./fixtures.js";
import { byKey, twoHandles, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";
import {
  ACCOUNTS,
  batchIn,
  bumpAccount,
  bumpSession,
  contents,
  EMPTY,
  entriesAfter,
  headOf,
  queuedFor,
  S1,
  S2,
  seeded,
} from "./write-batch-fixtures.js";

/** Registers the writeBatch tests of what a batch writes, inside the caller's `describe`. */
export function writeBatchWritesContract(opts: SubstrateContractOptions): void {
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
    await sub.transaction(async (tx) => tx.writeBatch(await batchIn(tx, [{ session: S1, nonce: 1 }], "one")));
    const before = await contents(sub);
    await sub.transaction(async (tx) => {
      await tx.writeBatch({ entries: [], outbox: [], reservations: [], sessions: [], accounts: [] });
      expect(await tx.chain.head()).toEqual(before.head);
    });
    expect(await contents(sub)).toEqual(before);
    expect(before.count).toBe(1);
  });
}
