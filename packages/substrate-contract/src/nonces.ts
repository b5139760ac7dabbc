// Contract tests for spent nonces: the chain entries' indexed nonce column, as NonceStore and append see it.
// Concurrent spends of one nonce across handles are covered in concurrency.ts; storage of entries in chain.ts.

import type { ChainEntryRecord, Nonce, Substrate, SubstrateTx } from "@leash/core";
import { describe, expect, it } from "vitest";
import { GENESIS_PREV_HASH, makeChainEntry, seedWorld, WORLD } from "./fixtures.js";
import { expectSubstrateError, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

const { session1: S1, session2: S2 } = WORLD;

/** The next entry after the head, spending `nonce` (null: none) for `sessionId`. */
export async function nextEntry(
  tx: SubstrateTx,
  sessionId: string | null,
  nonce: Nonce | null,
): Promise<ChainEntryRecord> {
  const head = await tx.chain.head();
  return makeChainEntry(head === null ? 0 : head.seq + 1, head?.entry_hash ?? GENESIS_PREV_HASH, {
    session_id: sessionId,
    ...(nonce === null ? {} : { nonce }),
  });
}

/** Appends the next entry, spending `nonce` for `sessionId`, in the transaction `tx`. */
export async function spendIn(tx: SubstrateTx, sessionId: string, nonce: Nonce): Promise<ChainEntryRecord> {
  const entry = await nextEntry(tx, sessionId, nonce);
  await tx.chain.append(entry);
  return entry;
}

/** Appends the next entry, spending `nonce` for `sessionId`, in a transaction of its own. */
export function spend(sub: Substrate, sessionId: string, nonce: Nonce): Promise<ChainEntryRecord> {
  return sub.transaction((tx) => spendIn(tx, sessionId, nonce));
}

export function nonceStoreContract(opts: SubstrateContractOptions): void {
  describe("nonces", () => {
    it("an appended entry spends its nonce; a second spend fails with conflict and appends nothing", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      expect(await sub.transaction((tx) => tx.nonces.has(S1, "n1"))).toBe(false);
      const first = await spend(sub, S1, "n1");
      expect(await sub.transaction((tx) => tx.nonces.has(S1, "n1"))).toBe(true);
      await sub.transaction(async (tx) => {
        await expectSubstrateError(tx.chain.append(await nextEntry(tx, S1, "n1")), "conflict");
        // The refused entry took nothing: the next seq is still free for an entry without a nonce.
        expect(await tx.chain.head()).toEqual({ seq: first.seq, entry_hash: first.entry_hash });
        expect(await tx.chain.count()).toBe(1);
      });
      // Within one transaction too: the second append sees the first.
      await expect(
        sub.transaction(async (tx) => {
          await spendIn(tx, S1, "n2");
          await tx.chain.append(await nextEntry(tx, S1, "n2"));
        }),
      ).rejects.toMatchObject({ code: "conflict" });
      const after = await sub.transaction(async (tx) => ({
        count: await tx.nonces.count(S1),
        n2: await tx.nonces.has(S1, "n2"),
        entries: await tx.chain.count(),
      }));
      expect(after).toEqual({ count: 1, n2: false, entries: 1 });
    });

    it("hasEach answers as has does for each pair, in order: committed, this transaction's, types, sessions", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await spend(sub, S1, "n1");
      await spend(sub, S2, 7);
      const pairs = [
        { sessionId: S1, nonce: "n1" }, // committed
        { sessionId: S1, nonce: "n2" }, // spent below, in the same transaction
        { sessionId: S1, nonce: "n3" }, // never
        { sessionId: S2, nonce: 7 }, // committed, a number
        { sessionId: S2, nonce: "7" }, // the string is another nonce
        { sessionId: S2, nonce: "n1" }, // another session's
        { sessionId: S1, nonce: "n1" }, // asked twice
      ];
      const answered = await sub.transaction(async (tx) => {
        const before = await tx.nonces.hasEach(pairs);
        await spendIn(tx, S1, "n2");
        const after = await tx.nonces.hasEach(pairs);
        const one = [];
        for (const { sessionId, nonce } of pairs) one.push(await tx.nonces.has(sessionId, nonce));
        return { before, after, one, none: await tx.nonces.hasEach([]) };
      });
      expect(answered.before).toEqual([true, false, false, true, false, false, true]);
      expect(answered.after).toEqual([true, true, false, true, false, false, true]);
      expect(answered.one).toEqual(answered.after);
      expect(answered.none).toEqual([]);
      // Told unspent by hasEach, a nonce still cannot be spent twice.
      await expect(
        sub.transaction(async (tx) => {
          expect(await tx.nonces.hasEach([{ sessionId: S1, nonce: "n2" }])).toEqual([true]);
          await tx.chain.append(await nextEntry(tx, S1, "n2"));
        }),
      ).rejects.toMatchObject({ code: "conflict" });
    });

    it("range gives each entry back with the nonce it was appended with, and none without", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const written = await sub.transaction(async (tx) => {
        const a = await spendIn(tx, S1, 7);
        const b = await nextEntry(tx, S1, null);
        await tx.chain.append(b);
        const c = await spendIn(tx, S2, "7");
        // An explicit null is no nonce either.
        const d = { ...(await nextEntry(tx, null, null)), nonce: null };
        await tx.chain.append(d);
        return [a, b, c, d];
      });
      const back = await sub.transaction((tx) => tx.chain.range(0, 10));
      expect(back.map((e) => e.nonce ?? null)).toEqual([7, null, "7", null]);
      expect(typeof back[0]?.nonce).toBe("number");
      expect(typeof back[2]?.nonce).toBe("string");
      expect(back.slice(0, 3)).toEqual(written.slice(0, 3));
    });

    it("refuses an entry with a nonce but no session, appending nothing", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const outcome = await sub
        .transaction(async (tx) => {
          const entry = await nextEntry(tx, null, "n1");
          await tx.chain.append({ ...entry, nonce: "n1" });
        })
        .then(
          () => "appended",
          (error: unknown) => error,
        );
      expect(outcome).toBeInstanceOf(TypeError);
      expect(await sub.transaction((tx) => tx.chain.count())).toBe(0);
    });

    it("has and count reflect exactly the nonces spent", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(0);
      expect(await sub.transaction((tx) => tx.nonces.has(S1, "a"))).toBe(false);
      await sub.transaction(async (tx) => {
        for (const n of ["a", "b", 3]) await spendIn(tx, S1, n);
        // Entries without a nonce spend none.
        await tx.chain.append(await nextEntry(tx, S1, null));
      });
      const seen = await sub.transaction(async (tx) => ({
        a: await tx.nonces.has(S1, "a"),
        b: await tx.nonces.has(S1, "b"),
        three: await tx.nonces.has(S1, 3),
        c: await tx.nonces.has(S1, "c"),
        count: await tx.nonces.count(S1),
      }));
      expect(seen).toEqual({ a: true, b: true, three: true, c: false, count: 3 });
    });

    it("a rolled-back append spends nothing: the nonce is free again", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const boom = new Error("rolled back");
      await expect(
        sub.transaction(async (tx) => {
          await spendIn(tx, S1, "n1");
          // Seen inside the transaction that spent it …
          expect(await tx.nonces.has(S1, "n1")).toBe(true);
          expect(await tx.nonces.count(S1)).toBe(1);
          throw boom;
        }),
      ).rejects.toBe(boom);
      // … and gone with it.
      expect(
        await sub.transaction(async (tx) => [await tx.nonces.has(S1, "n1"), await tx.nonces.count(S1)]),
      ).toEqual([false, 0]);
      const again = await spend(sub, S1, "n1");
      expect(again.seq).toBe(0);
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(1);
    });

    it('the number 7 and the string "7" are different nonces (also 0/"0", 1.5/"1.5", -1/"-1")', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const pairs: Array<[number, string]> = [
        [7, "7"],
        [0, "0"],
        [1.5, "1.5"],
        [-1, "-1"],
      ];
      for (const [num, str] of pairs) {
        await spend(sub, S1, num);
        expect(await sub.transaction((tx) => tx.nonces.has(S1, str))).toBe(false);
        await spend(sub, S1, str);
        for (const n of [num, str]) {
          await expect(spend(sub, S1, n)).rejects.toMatchObject({ code: "conflict" });
        }
      }
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(pairs.length * 2);
      expect(await sub.transaction((tx) => tx.chain.count())).toBe(pairs.length * 2);
    });

    it("nonces are scoped to their session", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await spend(sub, S1, "shared");
      expect(await sub.transaction((tx) => tx.nonces.has(S2, "shared"))).toBe(false);
      await spend(sub, S2, "shared");
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(1);
      expect(await sub.transaction((tx) => tx.nonces.count(S2))).toBe(1);
    });

    it("large integers, long and unusual strings are kept exactly as nonces", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const nonces: Nonce[] = [
        Number.MAX_SAFE_INTEGER,
        Number.MAX_SAFE_INTEGER - 1,
        String(Number.MAX_SAFE_INTEGER),
        "x".repeat(512),
        "ünï-😀-'\"-\\-%_",
        "",
      ];
      await sub.transaction(async (tx) => {
        for (const n of nonces) await spendIn(tx, S1, n);
      });
      for (const n of nonces) await expect(spend(sub, S1, n)).rejects.toMatchObject({ code: "conflict" });
      // Near-misses must not match: a LIKE pattern, a truncation, an off-by-one integer.
      const misses = await sub.transaction(async (tx) => [
        await tx.nonces.has(S1, "ünï-😀-'\"-\\-%"),
        await tx.nonces.has(S1, "x".repeat(511)),
        await tx.nonces.has(S1, Number.MAX_SAFE_INTEGER - 2),
      ]);
      expect(misses).toEqual([false, false, false]);
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(nonces.length);
      const back = await sub.transaction((tx) => tx.chain.range(0, 100));
      expect(back.map((e) => e.nonce)).toEqual(nonces);
    });
  });
}
