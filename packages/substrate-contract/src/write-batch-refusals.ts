// writeBatch contract, the refusals: a seq that does not continue the head, a spent or repeated nonce, a
// queued seq, a taken hold id, a missing row — each fails with its code and keeps nothing; and the order.

import type { SubstrateErrorCode } from "@leash/core";
import { expect, it } from "vitest";
import {
  chainEntryId,
  GENESIS_PREV_HASH,
  makeAccount,
  makeChainEntry,
  makeReservation,
  makeSession,
  outboxItemFor,
} from "./fixtures.js";
import { spend } from "./nonces.js";
import type { SubstrateContractOptions } from "./options.js";
import { batchIn, expectRefused, S1, S2, seeded } from "./write-batch-fixtures.js";

/** Registers the writeBatch tests of what a batch is refused for, inside the caller's `describe`. */
export function writeBatchRefusalsContract(opts: SubstrateContractOptions): void {
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
      ["ghost-account", (b) => ({ ...b, accounts: [...b.accounts, makeAccount("acct-ghost")] }), "not_found"],
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
}
