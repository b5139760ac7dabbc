// Contract tests for the ChainStore: exact round trips, the gapless head, conflicts, rollback, racing appenders.
// Hashing and signatures are not checked here (that is @leash/chain's verify); only storage and the head lock.

import { type ChainEntryRecord, type Substrate, SubstrateError } from "@leash/core";
import { describe, expect, it } from "vitest";
import {
  chainEntryId,
  GENESIS_PREV_HASH,
  makeChain,
  makeChainEntry,
  outboxItemFor,
  T0,
  WORLD,
} from "./fixtures.js";
import {
  CONCURRENCY_TIMEOUT_MS,
  expectSubstrateError,
  raceWindow,
  twoHandles,
  useHarness,
} from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

/** A real epoch-nanosecond reading (2026-11-30): an integral double above 2^53. */
const EPOCH_NS = 1_796_012_406_975_000_000;

/**
 * Bodies a JSONB column, a trimming driver or a charset conversion would change: key order and number
 * spelling JSONB normalizes, whitespace, escapes next to the characters they escape, astral and
 * combining characters, U+2028, CR LF, and a long body.
 */
const AWKWARD_BODIES = [
  '{"b":1,"a":1.0,"c":1e2,"d":-0,"e":{"z":[],"y":{}}}',
  '  {"spaced" :  "out"}\r\n\t',
  '{"escaped":"\\u00fc\\n\\"\\\\","raw":"ü\u2028\u2029 é (e + U+0301) 😀 𝄞 中文 \u00a0"}',
  "not JSON at all: ' \" \\ % _ ; -- /* */",
  `{"long":"${"x€".repeat(40_000)}"}`,
];

async function appendAll(sub: Substrate, entries: readonly ChainEntryRecord[]): Promise<void> {
  await sub.transaction(async (tx) => {
    for (const entry of entries) await tx.chain.append(entry);
  });
}

function headOf(entry: ChainEntryRecord): { seq: number; entry_hash: string } {
  return { seq: entry.seq, entry_hash: entry.entry_hash };
}

export function chainStoreContract(opts: SubstrateContractOptions): void {
  describe("chain", () => {
    it("an empty chain has no head, no entries and a count of 0", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const empty = await sub.transaction(async (tx) => ({
        head: await tx.chain.head(),
        range: await tx.chain.range(0, 10),
        count: await tx.chain.count(),
      }));
      expect(empty).toEqual({ head: null, range: [], count: 0 });
    });

    it("append → head, range and count round-trip every field exactly", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const [first, second] = makeChain(2);
      // A null session (key rotation) and real epoch nanoseconds on the third entry.
      const third = makeChainEntry(2, second!.entry_hash, {
        kind: "key_rotation",
        session_id: null,
        created_ns: EPOCH_NS,
      });
      await appendAll(sub, [first!, second!]);
      await sub.transaction((tx) => tx.chain.append(third));
      const back = await sub.transaction(async (tx) => ({
        head: await tx.chain.head(),
        all: await tx.chain.range(0, 100),
        count: await tx.chain.count(),
      }));
      expect(back).toEqual({ head: headOf(third), all: [first, second, third], count: 3 });
      expect(back.all[2]?.created_ns).toBe(EPOCH_NS);
      expect(back.all[2]?.session_id).toBeNull();
      expect(typeof back.all[0]?.seq).toBe("number");
    });

    it("range pages in seq order: fromSeq is inclusive, limit caps, past the head is empty", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const entries = makeChain(7);
      await appendAll(sub, entries);
      const pages = await sub.transaction(async (tx) => ({
        middle: await tx.chain.range(2, 3),
        tail: await tx.chain.range(5, 10),
        one: await tx.chain.range(6, 1),
        past: await tx.chain.range(7, 10),
        none: await tx.chain.range(0, 0),
      }));
      expect(pages).toEqual({
        middle: entries.slice(2, 5),
        tail: entries.slice(5),
        one: entries.slice(6),
        past: [],
        none: [],
      });
    });

    it("bodies come back byte for byte: key order, number spelling, whitespace, escapes, non-ASCII, 120 kB", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const entries: ChainEntryRecord[] = [];
      for (const [seq, body] of AWKWARD_BODIES.entries()) {
        entries.push(makeChainEntry(seq, entries.at(-1)?.entry_hash ?? GENESIS_PREV_HASH, { body }));
      }
      await appendAll(sub, entries);
      const back = await sub.transaction((tx) => tx.chain.range(0, AWKWARD_BODIES.length));
      expect(back.map((e) => e.body)).toEqual(AWKWARD_BODIES);
      for (const [i, entry] of back.entries()) {
        expect(Buffer.from(entry.body, "utf8").equals(Buffer.from(AWKWARD_BODIES[i]!, "utf8"))).toBe(true);
        expect(entry).toEqual(entries[i]);
      }
    });

    it("a body no store can keep exactly (lone surrogate, U+0000) is refused, and nothing is appended", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      for (const body of ['{"lone":"\ud800"}', '{"low":"\udc00x"}', '{"nul":"a\u0000b"}']) {
        const outcome = await sub
          .transaction((tx) => tx.chain.append(makeChainEntry(0, GENESIS_PREV_HASH, { body })))
          .then(
            () => "appended",
            () => "refused",
          );
        expect(outcome, JSON.stringify(body)).toBe("refused");
      }
      expect(await sub.transaction((tx) => tx.chain.count())).toBe(0);
      // A well-formed surrogate pair is fine.
      await sub.transaction((tx) =>
        tx.chain.append(makeChainEntry(0, GENESIS_PREV_HASH, { body: '{"pair":"\ud83d\ude00"}' })),
      );
      expect((await sub.transaction((tx) => tx.chain.range(0, 1)))[0]?.body).toBe('{"pair":"😀"}');
    });

    it("inside a transaction, head, range and count see its own appends", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const entries = makeChain(3);
      await appendAll(sub, entries.slice(0, 1));
      const seen = await sub.transaction(async (tx) => {
        const before = await tx.chain.head();
        await tx.chain.append(entries[1]!);
        const middle = await tx.chain.head();
        await tx.chain.append(entries[2]!);
        return {
          before,
          middle,
          after: await tx.chain.head(),
          count: await tx.chain.count(),
          range: await tx.chain.range(1, 10),
        };
      });
      expect(seen).toEqual({
        before: headOf(entries[0]!),
        middle: headOf(entries[1]!),
        after: headOf(entries[2]!),
        count: 3,
        range: entries.slice(1),
      });
    });

    it('append of a taken seq fails with "conflict"; the head does not move and the transaction goes on', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const entries = makeChain(3);
      await appendAll(sub, entries.slice(0, 2));
      const rival = makeChainEntry(1, entries[0]!.entry_hash, {
        entry_id: chainEntryId(1001),
        body: '{"r":1}',
      });
      const inside = await sub.transaction(async (tx) => {
        await expectSubstrateError(tx.chain.append(rival), "conflict");
        await expectSubstrateError(
          tx.chain.append(makeChainEntry(0, GENESIS_PREV_HASH, { entry_id: chainEntryId(1000) })),
          "conflict",
        );
        const head = await tx.chain.head();
        // The caught conflict spoiled nothing: the right next entry still appends and commits.
        await tx.chain.append(entries[2]!);
        return head;
      });
      expect(inside).toEqual(headOf(entries[1]!));
      await expectSubstrateError(
        sub.transaction((tx) => tx.chain.append(makeChainEntry(2, entries[1]!.entry_hash, { body: "{}" }))),
        "conflict",
      );
      const after = await sub.transaction(async (tx) => ({
        head: await tx.chain.head(),
        all: await tx.chain.range(0, 10),
      }));
      expect(after).toEqual({ head: headOf(entries[2]!), all: entries });
    });

    it('append of a taken entry_id, or of a seq past the next one, fails with "conflict" and moves nothing', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      // On an empty chain only seq 0 may come first.
      await expectSubstrateError(
        sub.transaction((tx) => tx.chain.append(makeChainEntry(1, GENESIS_PREV_HASH))),
        "conflict",
      );
      const entries = makeChain(2);
      await appendAll(sub, entries);
      const sameId = makeChainEntry(2, entries[1]!.entry_hash, { entry_id: entries[0]!.entry_id });
      const gap = makeChainEntry(3, entries[1]!.entry_hash);
      await sub.transaction(async (tx) => {
        await expectSubstrateError(tx.chain.append(sameId), "conflict");
        await expectSubstrateError(tx.chain.append(gap), "conflict");
        expect(await tx.chain.head()).toEqual(headOf(entries[1]!));
      });
      expect(
        await sub.transaction(async (tx) => ({ head: await tx.chain.head(), count: await tx.chain.count() })),
      ).toEqual({ head: headOf(entries[1]!), count: 2 });
    });

    it("a rolled-back transaction leaves neither its entries, nor a moved head, nor its outbox items", async () => {
      const [a, b] = await twoHandles(await useHarness(opts));
      const entries = makeChain(4);
      await a.transaction(async (tx) => {
        await tx.chain.append(entries[0]!);
        await tx.outbox.enqueue(outboxItemFor(entries[0]!));
      });
      const boom = new Error("boom after append");
      await expect(
        a.transaction(async (tx) => {
          for (const entry of entries.slice(1, 3)) {
            await tx.chain.append(entry);
            await tx.outbox.enqueue(outboxItemFor(entry));
          }
          throw boom;
        }),
      ).rejects.toBe(boom);
      const seen = (sub: Substrate) =>
        sub.transaction(async (tx) => ({
          head: await tx.chain.head(),
          count: await tx.chain.count(),
          range: await tx.chain.range(0, 10),
          outbox: (await tx.outbox.list({})).map((i) => i.seq),
          counts: await tx.outbox.counts(),
        }));
      const expected = {
        head: headOf(entries[0]!),
        count: 1,
        range: entries.slice(0, 1),
        outbox: [0],
        counts: { PENDING: 1, DELIVERED: 0, DEAD: 0 },
      };
      expect(await seen(a)).toEqual(expected);
      expect(await seen(b)).toEqual(expected);
      // The rolled-back seqs and entry ids are free again, from the other handle too.
      await b.transaction(async (tx) => {
        for (const entry of entries.slice(1)) {
          await tx.chain.append(entry);
          await tx.outbox.enqueue(outboxItemFor(entry));
        }
      });
      expect(await a.transaction((tx) => tx.chain.range(0, 10))).toEqual(entries);
    });

    it("mutating a returned entry, or an appended one afterwards, changes nothing stored", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const entries = makeChain(2);
      const written = structuredClone(entries[0]!);
      await sub.transaction(async (tx) => {
        await tx.chain.append(written);
        written.body = "mutated";
        await tx.chain.append(entries[1]!);
        const [got] = await tx.chain.range(0, 1);
        got!.body = "mutated too";
        const head = (await tx.chain.head())!;
        head.seq = 99;
      });
      const back = await sub.transaction(async (tx) => ({
        head: await tx.chain.head(),
        all: await tx.chain.range(0, 10),
      }));
      expect(back).toEqual({ head: headOf(entries[1]!), all: entries });
    });

    // What an engine's policy counters rely on (they are the fold of the chain's decisions, engine
    // README "Counters"): once a transaction has read the head, range() holds every entry up to it,
    // whichever handle appended it, so a batch can fold in what other engines appended before it judges.
    it("after head() in a transaction, range() holds every entry up to that head, whichever handle appended it", {
      timeout: CONCURRENCY_TIMEOUT_MS,
    }, async () => {
      const handles = await twoHandles(await useHarness(opts));
      const seen: Array<{ head: number; upTo: number; count: number }> = [];
      const appender = async (sub: Substrate, writer: number): Promise<void> => {
        for (let attempt = 0; attempt < 50; attempt++) {
          try {
            await sub.transaction(async (tx) => {
              const head = await tx.chain.head();
              await raceWindow(sub);
              const before = await tx.chain.range(0, 1000);
              const seq = head === null ? 0 : head.seq + 1;
              await tx.chain.append(
                makeChainEntry(seq, head?.entry_hash ?? GENESIS_PREV_HASH, {
                  entry_id: chainEntryId(20_000 + writer),
                  body: `{"seq":${seq},"writer":${writer}}`,
                  created_ns: T0 + writer,
                  session_id: null,
                }),
              );
              seen.push({ head: seq - 1, upTo: before.at(-1)?.seq ?? -1, count: before.length });
            });
            return;
          } catch (error) {
            if (!(SubstrateError.isInstance(error) && error.code === "conflict")) throw error;
          }
        }
        throw new Error(`writer ${writer} never appended`);
      };
      await Promise.all(Array.from({ length: 12 }, (_, writer) => appender(handles[writer % 2]!, writer)));
      expect(seen).toHaveLength(12);
      for (const s of seen) expect(s).toEqual({ head: s.head, upTo: s.head, count: s.head + 1 });
    });

    it("20 concurrent head → append(seq + 1) transactions over two handles build one gapless, linked chain", {
      timeout: CONCURRENCY_TIMEOUT_MS,
    }, async () => {
      const handles = await twoHandles(await useHarness(opts));
      let conflicts = 0;
      let otherErrors = 0;
      const appender = async (sub: Substrate, writer: number): Promise<number> => {
        for (let attempt = 0; attempt < 50; attempt++) {
          try {
            return await sub.transaction(async (tx) => {
              const head = await tx.chain.head();
              // Without the head lock another transaction would read the same head meanwhile.
              await raceWindow(sub);
              const seq = head === null ? 0 : head.seq + 1;
              const entry = makeChainEntry(seq, head?.entry_hash ?? GENESIS_PREV_HASH, {
                entry_id: chainEntryId(10_000 + writer),
                body: `{"seq":${seq},"writer":${writer}}`,
                created_ns: T0 + writer,
                session_id: writer % 2 === 0 ? WORLD.session1 : null,
              });
              await tx.chain.append(entry);
              await tx.outbox.enqueue(outboxItemFor(entry));
              // The engine signs a receipt and more after appending, all before it commits.
              await raceWindow(sub);
              return seq;
            });
          } catch (error) {
            if (SubstrateError.isInstance(error) && error.code === "conflict") conflicts++;
            else {
              otherErrors++;
              throw error;
            }
          }
        }
        throw new Error(`writer ${writer} never appended`);
      };
      const results = await Promise.allSettled(
        Array.from({ length: 20 }, (_, writer) => appender(handles[writer % 2]!, writer)),
      );
      expect(results.filter((r) => r.status === "rejected")).toEqual([]);
      expect(otherErrors).toBe(0);
      const seqs = results.map((r) => (r.status === "fulfilled" ? r.value : -1)).sort((x, y) => x - y);
      expect(seqs).toEqual(Array.from({ length: 20 }, (_, i) => i));
      // head() locks the head, so no transaction ever read a head another then appended after.
      expect(conflicts, "appends that conflicted: head() did not lock the head").toBe(0);

      const stored = await handles[1].transaction(async (tx) => ({
        head: await tx.chain.head(),
        count: await tx.chain.count(),
        chain: await tx.chain.range(0, 100),
        outbox: await tx.outbox.list({}),
      }));
      expect(stored.count).toBe(20);
      expect(stored.chain.map((e) => e.seq)).toEqual(seqs);
      expect(stored.head).toEqual(headOf(stored.chain[19]!));
      for (const [i, entry] of stored.chain.entries()) {
        const prev = i === 0 ? GENESIS_PREV_HASH : stored.chain[i - 1]!.entry_hash;
        expect(entry.prev_hash, `prev link of seq ${i}`).toBe(prev);
        expect(JSON.parse(entry.body).seq).toBe(i);
      }
      expect(new Set(stored.chain.map((e) => e.entry_id)).size).toBe(20);
      expect(stored.outbox.map((i) => [i.seq, i.entry_id])).toEqual(
        stored.chain.map((e) => [e.seq, e.entry_id]),
      );
    });
  });
}
