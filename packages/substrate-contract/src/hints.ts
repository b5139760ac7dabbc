// Contract tests for transaction hints (TransactionHints): a store may read hinted rows ahead, but what fn
// sees must be exactly what it would see without them, under contention and rollbacks too.

import type { Substrate, SubstrateTx, TransactionHints } from "@leash/core";
import { describe, expect, it } from "vitest";
import { GENESIS_PREV_HASH, makeChainEntry, seedWorld, WORLD } from "./fixtures.js";
import { CONCURRENCY_TIMEOUT_MS, twoHandles, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

/** Everything the hinted transactions below read, and compare with the same reads made without hints. */
async function readAll(tx: SubstrateTx) {
  const read = {
    session: await tx.sessions.get(WORLD.session1),
    missing: await tx.sessions.get("sess-missing"),
    seen: await tx.nonces.has(WORLD.session1, "n-old"),
    unseen: await tx.nonces.has(WORLD.session1, "n-never"),
    account: await tx.budgets.getAccount(WORLD.sessionAccount),
    noAccount: await tx.budgets.getAccount("acct-missing"),
    head: await tx.chain.head(),
  };
  // The entry at the head, as the engine reads it to learn which key is in force, and a wider range.
  const at = read.head?.seq ?? 0;
  return { ...read, atHead: await tx.chain.range(at, 1), fromHeadOn: await tx.chain.range(at, 5) };
}

/** readAll in a transaction of its own, without hints. */
function plainRead(sub: Substrate) {
  return sub.transaction(readAll);
}

class Planned extends Error {}

export function hintsContract(opts: SubstrateContractOptions): void {
  describe("transaction hints", () => {
    it("change nothing fn sees, whether they name rows, missing rows or malformed values", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await sub.transaction(async (tx) => {
        await tx.chain.append(makeChainEntry(0, GENESIS_PREV_HASH, { nonce: "n-old" }));
      });
      const expected = await plainRead(sub);
      expect(expected.session?.session_id).toBe(WORLD.session1);
      expect(expected.account?.account_id).toBe(WORLD.sessionAccount);
      expect(expected.head?.seq).toBe(0);
      const hints = [
        {
          sessions: [WORLD.session1],
          nonces: [{ sessionId: WORLD.session1, nonce: "n-old" }],
        },
        {
          sessions: ["sess-missing", "bad\u0000id", 7, "", WORLD.session1],
          nonces: [
            { sessionId: WORLD.session1, nonce: { not: "a nonce" } },
            { sessionId: "sess-missing", nonce: "n-old" },
            { sessionId: WORLD.session1, nonce: "n-never" },
            null,
          ],
        },
        { sessions: "not a list", nonces: 42 },
        { sessions: [], nonces: [{ sessionId: WORLD.session1, nonce: "n-old" }] },
        { sessions: [WORLD.session1], accounts: [WORLD.sessionAccount], chainHead: true },
        {
          sessions: [WORLD.session1],
          accounts: ["acct-missing", WORLD.sessionAccount, "bad\u0000id", 7, "", null],
          chainHead: "yes",
        },
        { sessions: [WORLD.session1], accounts: "not a list", chainHead: 1 },
        { accounts: [WORLD.sessionAccount], chainHead: true },
      ] as unknown as TransactionHints[];
      // Issued together, so a group-committing store reads them ahead for one batch.
      const seen = await Promise.all(hints.map((h) => sub.transaction(readAll, h)));
      for (const read of seen) expect(read).toEqual(expected);
      // Copies, as ever: changing what one transaction was handed changes nothing stored.
      seen[0]!.session!.state.total_calls = 999;
      seen[0]!.account!.spent_usd = "9";
      seen[0]!.head!.seq = 99;
      seen[4]!.atHead[0]!.signature = "changed";
      expect(await plainRead(sub)).toEqual(expected);
      expect(expected.atHead.map((e) => e.seq)).toEqual([0]);
    });

    it("hinted transactions racing on one session and nonce over two handles behave as if run one after another", {
      timeout: CONCURRENCY_TIMEOUT_MS,
    }, async () => {
      const handles = await twoHandles(await useHarness(opts));
      await seedWorld(handles[0]);
      const start = (await plainRead(handles[0])).session!.call_count;
      await handles[0].transaction((tx) => tx.chain.append(makeChainEntry(0, GENESIS_PREV_HASH)));
      // The first eight read and spend nonce "early"; the rest "late", whose first spending then
      // happens behind others queued on the same session (inside a batch, on a batching store).
      const nonceOf = (i: number) => (i < 8 ? "early" : "late");
      const hintsOf = (i: number): TransactionHints => ({
        sessions: [WORLD.session1],
        nonces: [{ sessionId: WORLD.session1, nonce: nonceOf(i) }],
        accounts: [WORLD.sessionAccount],
        chainHead: true,
      });
      // Each reads the session and its nonce as the engine does (together), spends the nonce if
      // unseen, and counts itself in call_count; every third throws after writing, which must
      // leave no trace for those after it.
      const results = await Promise.allSettled(
        Array.from({ length: 24 }, (_, i) =>
          handles[i % 2]!.transaction(async (tx) => {
            const [session, seen] = await Promise.all([
              tx.sessions.get(WORLD.session1),
              tx.nonces.has(WORLD.session1, nonceOf(i)),
            ]);
            await tx.sessions.update({ ...session!, call_count: session!.call_count + 1 });
            // As a decision does: charge the account, then append after the head it read.
            const [account, head] = await Promise.all([
              tx.budgets.getAccount(WORLD.sessionAccount),
              tx.chain.head(),
            ]);
            // The entry at the head, as the engine reads it when another writer appended last: it
            // must be the one the head names, written by a committed (or released) transaction.
            const [atHead, ...beyond] = await tx.chain.range(head!.seq, 2);
            if (atHead?.entry_hash !== head!.entry_hash || beyond.length > 0) {
              throw new Error(`range(${head!.seq}) gave ${JSON.stringify(atHead)} and ${beyond.length} more`);
            }
            await tx.budgets.updateAccount({
              ...account!,
              spent_usd: String(Number(account!.spent_usd) + 1),
            });
            // The entry spends the nonce when it was unseen, as an ALLOW decision does.
            const entry = makeChainEntry(head!.seq + 1, head!.entry_hash, seen ? {} : { nonce: nonceOf(i) });
            await tx.chain.append(entry);
            const [appended] = await tx.chain.range(head!.seq + 1, 1);
            if (
              appended?.signature !== entry.signature ||
              (appended.nonce ?? null) !== (entry.nonce ?? null)
            ) {
              throw new Error(`range(${head!.seq + 1}) after the append gave ${JSON.stringify(appended)}`);
            }
            if (i % 3 === 2) throw new Planned(`planned failure ${i}`);
            return { nonce: nonceOf(i), seen, counted: session!.call_count + 1 };
          }, hintsOf(i)),
        ),
      );
      const committed = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
      const failed = results.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
      expect(failed).toHaveLength(8);
      for (const reason of failed) expect(reason).toBeInstanceOf(Planned);
      for (const nonce of ["early", "late"]) {
        expect(committed.filter((r) => r.nonce === nonce && !r.seen)).toHaveLength(1);
      }
      // No lost or phantom update: the counts each saw are exactly start+1 … start+16.
      expect(committed.map((r) => r.counted).sort((a, b) => a - b)).toEqual(
        Array.from({ length: 16 }, (_, i) => start + 1 + i),
      );
      const after = await plainRead(handles[1]);
      expect(after.session!.call_count).toBe(start + 16);
      expect(after.account!.spent_usd).toBe("16");
      expect(after.head!.seq).toBe(16);
      const chain = await handles[1].transaction((tx) => tx.chain.range(0, 100));
      expect(chain.map((e) => e.seq)).toEqual(Array.from({ length: 17 }, (_, i) => i));
      for (let i = 1; i < chain.length; i++) expect(chain[i]!.prev_hash).toBe(chain[i - 1]!.entry_hash);
      expect(await handles[1].transaction((tx) => tx.nonces.has(WORLD.session1, "late"))).toBe(true);
    });
  });
}
