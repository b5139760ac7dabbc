// Contract tests for MessageStore: decided request messages, recorded with their decision's entry, pruned by age.
// What the engine answers for a re-delivered message is the engine's test; this checks the store alone.

import type { MessageRecord, Substrate } from "@leash/core";
import { describe, expect, it } from "vitest";
import { GENESIS_PREV_HASH, makeChainEntry, seedWorld, T0, WORLD } from "./fixtures.js";
import {
  CONCURRENCY_TIMEOUT_MS,
  expectSubstrateError,
  raceWindow,
  twoHandles,
  useHarness,
} from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

const { session1: S1, session2: S2 } = WORLD;
/** An envelope timestamp as the daemon sends it: epoch nanoseconds, beyond 2^53. */
const SENT = 1_764_806_400_123_456_800;

function message(messageId: string, overrides: Partial<MessageRecord> = {}): MessageRecord {
  return { session_id: S1, message_id: messageId, entry_seq: 0, sent_ns: SENT, ...overrides };
}

const count = (sub: Substrate) => sub.transaction((tx) => tx.messages.count());

export function messageStoreContract(opts: SubstrateContractOptions): void {
  describe("messages", () => {
    it("a recorded message reads back as written, in its transaction and after; other keys are absent", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const m1 = message("018f2b6e-7c3a-7d4e-9f10-aa00bb11cc22", { entry_seq: 41 });
      const inside = await sub.transaction(async (tx) => {
        expect(await tx.messages.get(S1, m1.message_id)).toBeNull();
        await tx.messages.insert(m1);
        return tx.messages.get(S1, m1.message_id);
      });
      expect(inside).toEqual(m1);
      const after = await sub.transaction(async (tx) => ({
        mine: await tx.messages.get(S1, m1.message_id),
        // The id is scoped to its session: the same id in another session is another message.
        otherSession: await tx.messages.get(S2, m1.message_id),
        otherId: await tx.messages.get(S1, "018f2b6e-7c3a-7d4e-9f10-aa00bb11cc23"),
      }));
      expect(after).toEqual({ mine: m1, otherSession: null, otherId: null });
      expect(await count(sub)).toBe(1);
    });

    it("getEach answers as get does for each pair, in order: committed, this transaction's, absent, repeated", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const a = message("m-a", { entry_seq: 1 });
      const b = message("m-b", { session_id: S2, entry_seq: 2, sent_ns: T0 });
      await sub.transaction((tx) => tx.messages.insert(a));
      const answered = await sub.transaction(async (tx) => {
        await tx.messages.insert(b);
        expect(await tx.messages.getEach([])).toEqual([]);
        return tx.messages.getEach([
          { sessionId: S1, messageId: "m-a" },
          { sessionId: S2, messageId: "m-b" },
          { sessionId: S1, messageId: "m-b" },
          { sessionId: S1, messageId: "m-a" },
        ]);
      });
      expect(answered).toEqual([a, b, null, a]);
    });

    it('a second record of one message fails with "conflict" and keeps the first, committed or in the same transaction', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const first = message("m-1", { entry_seq: 5 });
      await sub.transaction((tx) => tx.messages.insert(first));
      await sub.transaction(async (tx) => {
        await expectSubstrateError(tx.messages.insert({ ...first, entry_seq: 6 }), "conflict");
      });
      await expect(
        sub.transaction(async (tx) => {
          await tx.messages.insert(message("m-2"));
          await tx.messages.insert(message("m-2", { entry_seq: 9 }));
        }),
      ).rejects.toMatchObject({ code: "conflict" });
      const after = await sub.transaction(async (tx) => ({
        first: await tx.messages.get(S1, "m-1"),
        second: await tx.messages.get(S1, "m-2"),
      }));
      expect(after).toEqual({ first, second: null });
    });

    it("a batch's messages commit with its entries, and roll back with them", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const entry = makeChainEntry(0, GENESIS_PREV_HASH, { session_id: S1 });
      const recorded = message("m-batch", { entry_seq: 0 });
      const batch = { entries: [entry], outbox: [], reservations: [], sessions: [], accounts: [] };
      await expect(
        sub.transaction(async (tx) => {
          await tx.writeBatch({ ...batch, messages: [recorded] });
          expect(await tx.messages.get(S1, "m-batch")).toEqual(recorded);
          throw new Error("the decision failed after its batch");
        }),
      ).rejects.toThrow("the decision failed after its batch");
      expect(
        await sub.transaction(async (tx) => [await tx.chain.count(), await tx.messages.count()]),
      ).toEqual([0, 0]);
      await sub.transaction((tx) => tx.writeBatch({ ...batch, messages: [recorded] }));
      expect(await sub.transaction((tx) => tx.messages.get(S1, "m-batch"))).toEqual(recorded);
      // A batch whose message is recorded already fails as insert does, and keeps none of its writes.
      const next = makeChainEntry(1, entry.entry_hash, { session_id: S1 });
      await expect(
        sub.transaction((tx) =>
          tx.writeBatch({ ...batch, entries: [next], messages: [{ ...recorded, entry_seq: 1 }] }),
        ),
      ).rejects.toMatchObject({ code: "conflict" });
      expect(await sub.transaction((tx) => tx.chain.count())).toBe(1);
      expect(await sub.transaction((tx) => tx.messages.get(S1, "m-batch"))).toEqual(recorded);
      // Several messages in one batch: all kept, or (one recorded already, or one twice) none.
      const many = [message("m-x", { entry_seq: 1 }), message("m-y", { session_id: S2, entry_seq: 1 })];
      for (const clash of [
        [...many, recorded],
        [...many, { ...many[0]!, entry_seq: 2 }],
      ]) {
        await expect(
          sub.transaction((tx) => tx.writeBatch({ ...batch, entries: [next], messages: clash })),
        ).rejects.toMatchObject({ code: "conflict" });
      }
      expect(
        await sub.transaction(async (tx) => [await tx.chain.count(), await tx.messages.count()]),
      ).toEqual([1, 1]);
      await sub.transaction((tx) => tx.writeBatch({ ...batch, entries: [next], messages: many }));
      expect(
        await sub.transaction((tx) =>
          tx.messages.getEach(many.map((m) => ({ sessionId: m.session_id, messageId: m.message_id }))),
        ),
      ).toEqual(many);
    });

    it("prune deletes records sent before the bound, oldest first, at most `limit`, and keeps the rest", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const at = (i: number) => SENT + i * 1_000_000_000;
      await sub.transaction(async (tx) => {
        for (let i = 0; i < 6; i++) await tx.messages.insert(message(`m-${i}`, { sent_ns: at(i) }));
      });
      // Sent before at(4): m-0 … m-3; two at a time, the oldest first.
      expect(await sub.transaction((tx) => tx.messages.prune(at(4), 2))).toBe(2);
      const left = await sub.transaction((tx) =>
        tx.messages.getEach([0, 1, 2, 3, 4, 5].map((i) => ({ sessionId: S1, messageId: `m-${i}` }))),
      );
      expect(left.map((r) => r?.message_id ?? null)).toEqual([null, null, "m-2", "m-3", "m-4", "m-5"]);
      expect(await sub.transaction((tx) => tx.messages.prune(at(4), 100))).toBe(2);
      expect(await sub.transaction((tx) => tx.messages.prune(at(4), 100))).toBe(0);
      expect(await count(sub)).toBe(2);
      // A pruned message can be recorded again (the transport refuses its copies by timestamp by then).
      await sub.transaction((tx) => tx.messages.insert(message("m-0", { sent_ns: at(9) })));
      expect(await count(sub)).toBe(3);
    });

    it("two handles racing to record one message: exactly one commits, the other fails with conflict", {
      timeout: CONCURRENCY_TIMEOUT_MS,
    }, async () => {
      const handles = await twoHandles(await useHarness(opts));
      for (let round = 0; round < 5; round++) {
        const id = `m-race-${round}`;
        const results = await Promise.allSettled(
          handles.map((sub, i) =>
            sub.transaction(async (tx) => {
              const seen = await tx.messages.get(S1, id);
              await raceWindow(sub);
              if (seen !== null) return "seen";
              await tx.messages.insert(message(id, { entry_seq: i }));
              return "recorded";
            }),
          ),
        );
        const recorded = results.filter((r) => r.status === "fulfilled" && r.value === "recorded");
        expect(recorded).toHaveLength(1);
        for (const r of results) {
          if (r.status === "rejected") expect(r.reason).toMatchObject({ code: "conflict" });
        }
        const stored = await handles[round % 2]!.transaction((tx) => tx.messages.get(S1, id));
        expect(stored?.entry_seq).toBe(
          results.findIndex((r) => r.status === "fulfilled" && r.value === "recorded"),
        );
      }
    });
  });
}
