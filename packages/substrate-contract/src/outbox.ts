// Contract tests for the OutboxStore: enqueue, leases (claim, expiry, reclaim), settling by the holder, requeue.
// Delivery itself (sinks, retries, backoff) is @leash/relay's; here only who may hold and settle which item.

import type { OutboxItem, Substrate } from "@leash/core";
import { describe, expect, it } from "vitest";
import { T0, WORLD } from "./fixtures.js";
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
/** 30 s, in nanoseconds. */
const LEASE_NS = 30_000_000_000;

function queued(seq: number, overrides: Partial<OutboxItem> = {}): OutboxItem {
  return {
    seq,
    entry_id: `01890000-0000-7000-8000-${seq.toString(16).padStart(12, "0")}`,
    session_id: seq % 3 === 0 ? null : WORLD.session1,
    status: "PENDING",
    attempts: 0,
    claimed_by: null,
    lease_until_ns: null,
    last_error: null,
    created_ns: T0 + seq,
    ...overrides,
  };
}

async function enqueue(sub: Substrate, seqs: readonly number[]): Promise<void> {
  await sub.transaction(async (tx) => {
    for (const seq of seqs) {
      const { entry_id, session_id, created_ns } = queued(seq);
      await tx.outbox.enqueue({ seq, entry_id, session_id, created_ns });
    }
  });
}

const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);

function claim(sub: Substrate, relayId: string, limit: number, nowNs = T0, leaseNs = LEASE_NS) {
  return sub.transaction((tx) => tx.outbox.claim({ relayId, limit, nowNs, leaseNs }));
}

const seqsOf = (items: readonly OutboxItem[]) => items.map((i) => i.seq);

export function outboxStoreContract(opts: SubstrateContractOptions): void {
  describe("outbox", () => {
    it("enqueue → list and counts round-trip every field; list orders by seq and filters", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, [4, 1, 3, 0, 2]);
      await sub.transaction((tx) =>
        tx.outbox.enqueue({ seq: 5, entry_id: "e-epoch", session_id: "sëss-ünï", created_ns: EPOCH_NS }),
      );
      const back = await sub.transaction(async (tx) => ({
        all: await tx.outbox.list({}),
        pending: await tx.outbox.list({ status: "PENDING", limit: 2 }),
        delivered: await tx.outbox.list({ status: "DELIVERED" }),
        limited: await tx.outbox.list({ limit: 3 }),
        counts: await tx.outbox.counts(),
      }));
      const epoch = queued(5, { entry_id: "e-epoch", session_id: "sëss-ünï", created_ns: EPOCH_NS });
      expect(back).toEqual({
        all: [...range(0, 5).map((seq) => queued(seq)), epoch],
        pending: [queued(0), queued(1)],
        delivered: [],
        limited: [queued(0), queued(1), queued(2)],
        counts: { PENDING: 6, DELIVERED: 0, DEAD: 0 },
      });
      expect(back.all[5]?.created_ns).toBe(EPOCH_NS);
    });

    it('enqueue of a seq already queued fails with "conflict" and keeps the first', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, [0]);
      await expectSubstrateError(
        sub.transaction((tx) =>
          tx.outbox.enqueue({ seq: 0, entry_id: "other", session_id: null, created_ns: T0 + 99 }),
        ),
        "conflict",
      );
      // A caught conflict leaves the rest of the transaction usable.
      await sub.transaction(async (tx) => {
        await expectSubstrateError(
          tx.outbox.enqueue({ seq: 0, entry_id: "other", session_id: null, created_ns: T0 }),
          "conflict",
        );
        await tx.outbox.enqueue({
          seq: 1,
          entry_id: queued(1).entry_id,
          session_id: WORLD.session1,
          created_ns: T0 + 1,
        });
      });
      expect(await sub.transaction((tx) => tx.outbox.list({}))).toEqual([queued(0), queued(1)]);
    });

    it("an empty outbox claims nothing and counts zeros", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      expect(await claim(sub, "relay-a", 10)).toEqual([]);
      expect(await sub.transaction((tx) => tx.outbox.counts())).toEqual({
        PENDING: 0,
        DELIVERED: 0,
        DEAD: 0,
      });
    });

    it("claim leases the lowest seqs first, up to limit, and counts the attempt", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, [7, 2, 9, 4, 0]);
      const first = await claim(sub, "relay-a", 3);
      const leased = { claimed_by: "relay-a", lease_until_ns: T0 + LEASE_NS, attempts: 1 };
      expect(first).toEqual([0, 2, 4].map((seq) => queued(seq, leased)));
      // While those leases live, neither relay gets them again: the next claims take what is left.
      expect(seqsOf(await claim(sub, "relay-a", 10, T0 + 1))).toEqual([7, 9]);
      expect(await claim(sub, "relay-b", 10, T0 + 2)).toEqual([]);
      expect(await sub.transaction((tx) => tx.outbox.list({}))).toEqual([
        queued(0, leased),
        queued(2, leased),
        queued(4, leased),
        queued(7, { ...leased, lease_until_ns: T0 + 1 + LEASE_NS }),
        queued(9, { ...leased, lease_until_ns: T0 + 1 + LEASE_NS }),
      ]);
      expect(await claim(sub, "relay-b", 0, T0 + 3)).toEqual([]);
    });

    it("claim with epoch-nanosecond clocks stores nowNs + leaseNs exactly", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, [0]);
      const [item] = await claim(sub, "relay-a", 1, EPOCH_NS, LEASE_NS);
      expect(item?.lease_until_ns).toBe(EPOCH_NS + LEASE_NS);
      expect(await claim(sub, "relay-b", 1, EPOCH_NS + LEASE_NS - 1024)).toEqual([]);
      const [again] = await claim(sub, "relay-b", 1, EPOCH_NS + LEASE_NS);
      expect(again?.lease_until_ns).toBe(EPOCH_NS + LEASE_NS + LEASE_NS);
    });

    it("ack marks DELIVERED only what the relay holds and returns how many; others' acks change nothing", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, range(0, 4));
      await claim(sub, "relay-a", 2);
      await claim(sub, "relay-b", 1);
      const before = await sub.transaction((tx) => tx.outbox.list({}));
      // relay-b does not hold 0 or 1, nobody holds 3, and 99 does not exist.
      expect(await sub.transaction((tx) => tx.outbox.ack("relay-b", [0, 1, 3, 99]))).toBe(0);
      expect(await sub.transaction((tx) => tx.outbox.ack("relay-c", [0, 1, 2, 3]))).toBe(0);
      expect(await sub.transaction((tx) => tx.outbox.list({}))).toEqual(before);

      expect(await sub.transaction((tx) => tx.outbox.ack("relay-a", [0, 1, 2, 1]))).toBe(2);
      expect(await sub.transaction((tx) => tx.outbox.ack("relay-a", [0, 1]))).toBe(0);
      expect(await sub.transaction((tx) => tx.outbox.ack("relay-a", []))).toBe(0);
      const after = await sub.transaction(async (tx) => ({
        delivered: await tx.outbox.list({ status: "DELIVERED" }),
        counts: await tx.outbox.counts(),
      }));
      expect(after.delivered).toEqual(
        [0, 1].map((seq) => queued(seq, { status: "DELIVERED", claimed_by: "relay-a", attempts: 1 })),
      );
      expect(after.counts).toEqual({ PENDING: 2, DELIVERED: 2, DEAD: 0 });
      // Delivered items are never claimed again, even long after the lease.
      expect(seqsOf(await claim(sub, "relay-a", 10, T0 + 10 * LEASE_NS))).toEqual([2, 3]);
    });

    it("an expired lease can be reclaimed by another relay; the first relay then can neither ack nor fail it", async () => {
      const [a, b] = await twoHandles(await useHarness(opts));
      await enqueue(a, [0, 1]);
      await claim(a, "relay-a", 2, T0);
      // One nanosecond before the lease ends it still holds; at its end it has expired.
      expect(await claim(b, "relay-b", 10, T0 + LEASE_NS - 1)).toEqual([]);
      const reclaimed = await claim(b, "relay-b", 1, T0 + LEASE_NS);
      expect(reclaimed).toEqual([
        queued(0, { claimed_by: "relay-b", lease_until_ns: T0 + 2 * LEASE_NS, attempts: 2 }),
      ]);
      expect(await a.transaction((tx) => tx.outbox.ack("relay-a", [0]))).toBe(0);
      await a.transaction((tx) => tx.outbox.fail("relay-a", 0, "late failure", true));
      expect((await b.transaction((tx) => tx.outbox.list({})))[0]).toEqual(reclaimed[0]);
      // An expired lease nobody took over is still the relay's to settle.
      expect(await a.transaction((tx) => tx.outbox.ack("relay-a", [1]))).toBe(1);
      expect(await b.transaction((tx) => tx.outbox.ack("relay-b", [0]))).toBe(1);
      expect(await b.transaction((tx) => tx.outbox.counts())).toEqual({ PENDING: 0, DELIVERED: 2, DEAD: 0 });
    });

    it("fail returns an item to PENDING with its error, or moves it to DEAD keeping the error; only for the holder", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, range(0, 3));
      await claim(sub, "relay-a", 3);
      await sub.transaction(async (tx) => {
        await tx.outbox.fail("relay-b", 0, "not mine", true);
        await tx.outbox.fail("relay-a", 99, "no such item", false);
      });
      expect((await sub.transaction((tx) => tx.outbox.list({}))).map((i) => i.last_error)).toEqual([
        null,
        null,
        null,
      ]);

      await sub.transaction(async (tx) => {
        await tx.outbox.fail("relay-a", 0, "HTTP 503 from sink ✗", false);
        await tx.outbox.fail("relay-a", 1, "HTTP 400: rejected for good", true);
      });
      const back = await sub.transaction(async (tx) => ({
        all: await tx.outbox.list({}),
        dead: await tx.outbox.list({ status: "DEAD" }),
        counts: await tx.outbox.counts(),
      }));
      expect(back.all[0]).toEqual(queued(0, { attempts: 1, last_error: "HTTP 503 from sink ✗" }));
      expect(back.dead).toEqual([
        queued(1, {
          status: "DEAD",
          attempts: 1,
          claimed_by: "relay-a",
          last_error: "HTTP 400: rejected for good",
        }),
      ]);
      expect(back.counts).toEqual({ PENDING: 2, DELIVERED: 0, DEAD: 1 });

      // A failed item is free at once (the relay owns backoff); a DEAD one is never claimed or acked.
      const retried = await claim(sub, "relay-b", 10, T0 + 1);
      expect(retried).toEqual([
        queued(0, {
          attempts: 2,
          claimed_by: "relay-b",
          lease_until_ns: T0 + 1 + LEASE_NS,
          last_error: "HTTP 503 from sink ✗",
        }),
      ]);
      expect(await sub.transaction((tx) => tx.outbox.ack("relay-a", [1]))).toBe(0);
      await sub.transaction((tx) => tx.outbox.fail("relay-a", 1, "again", false));
      expect((await sub.transaction((tx) => tx.outbox.list({ status: "DEAD" })))[0]?.last_error).toBe(
        "HTTP 400: rejected for good",
      );
      expect(await claim(sub, "relay-c", 10, T0 + 100 * LEASE_NS)).toEqual([
        expect.objectContaining({ seq: 0, attempts: 3 }),
        expect.objectContaining({ seq: 2, attempts: 2 }),
      ]);
    });

    it("fail with unsent gives the claim's attempt back; only the holder's, only for a retry, never below 0", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, range(0, 3));
      expect(seqsOf(await claim(sub, "relay-a", 3))).toEqual([0, 1, 2]);
      await sub.transaction(async (tx) => {
        await tx.outbox.fail("relay-a", 0, "HTTP 503", false);
        await tx.outbox.fail("relay-a", 1, "waiting for seq 0 of its session", false, { unsent: true });
        // unsent means nothing for an item made DEAD, and nothing for one another relay holds.
        await tx.outbox.fail("relay-a", 2, "HTTP 400", true, { unsent: true });
      });
      expect(await sub.transaction((tx) => tx.outbox.list({}))).toEqual([
        queued(0, { attempts: 1, last_error: "HTTP 503" }),
        queued(1, { attempts: 0, last_error: "waiting for seq 0 of its session" }),
        queued(2, { status: "DEAD", attempts: 1, claimed_by: "relay-a", last_error: "HTTP 400" }),
      ]);
      // Claimed and given back untried ten times over: still never tried.
      for (let round = 1; round <= 10; round++) {
        expect(seqsOf(await claim(sub, "relay-b", 1, T0 + round))).toEqual([0]);
        await sub.transaction((tx) => tx.outbox.fail("relay-b", 0, "stopped early", false, { unsent: true }));
        await sub.transaction((tx) =>
          tx.outbox.fail("relay-b", 0, "not held any more", false, { unsent: true }),
        );
      }
      const [first, second] = await sub.transaction((tx) => tx.outbox.list({ limit: 2 }));
      expect(first).toEqual(queued(0, { attempts: 1, last_error: "stopped early" }));
      expect(second).toEqual(queued(1, { attempts: 0, last_error: "waiting for seq 0 of its session" }));
    });

    it("a rolled-back claim, ack or fail leaves the items as they were", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, range(0, 3));
      await claim(sub, "relay-a", 1);
      const before = await sub.transaction((tx) => tx.outbox.list({}));
      const boom = new Error("boom");
      await expect(
        sub.transaction(async (tx) => {
          expect(
            seqsOf(await tx.outbox.claim({ relayId: "relay-b", limit: 5, nowNs: T0, leaseNs: 1 })),
          ).toEqual([1, 2]);
          expect(await tx.outbox.ack("relay-a", [0])).toBe(1);
          await tx.outbox.fail("relay-b", 1, "x", true);
          expect(await tx.outbox.counts()).toEqual({ PENDING: 1, DELIVERED: 1, DEAD: 1 });
          throw boom;
        }),
      ).rejects.toBe(boom);
      expect(await sub.transaction((tx) => tx.outbox.list({}))).toEqual(before);
    });

    it("requeue by seqs moves only those that are DEAD: PENDING, attempts 0, free, reason kept behind a prefix", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, range(0, 6));
      await claim(sub, "relay-a", 5);
      await sub.transaction(async (tx) => {
        await tx.outbox.ack("relay-a", [0]);
        await tx.outbox.fail("relay-a", 1, "HTTP 401 Unauthorized: bad signature ✗", true);
        await tx.outbox.fail("relay-a", 2, "HTTP 400", true);
        await tx.outbox.fail("relay-a", 3, "HTTP 503", false);
      });
      // 0 DELIVERED, 1 and 2 DEAD, 3 PENDING with an error, 4 leased, 5 never claimed.
      const before = await sub.transaction((tx) => tx.outbox.list({}));
      expect(before.map((i) => i.status)).toEqual([
        "DELIVERED",
        "DEAD",
        "DEAD",
        "PENDING",
        "PENDING",
        "PENDING",
      ]);

      // Repeated, non-DEAD and unknown seqs are passed over; only seq 1 moves.
      const moved = await sub.transaction((tx) =>
        tx.outbox.requeue({ seqs: [1, 0, 3, 4, 5, 99, 1], nowNs: EPOCH_NS }),
      );
      expect(moved).toBe(1);
      const after = await sub.transaction((tx) => tx.outbox.list({}));
      // nowNs is spelled as the exact integer the double holds, as an integer column stores it.
      expect(after[1]).toEqual(
        queued(1, { last_error: "requeued at 1796012406975000064: HTTP 401 Unauthorized: bad signature ✗" }),
      );
      expect(after.filter((i) => i.seq !== 1)).toEqual(before.filter((i) => i.seq !== 1));
      expect(await sub.transaction((tx) => tx.outbox.counts())).toEqual({
        PENDING: 4,
        DELIVERED: 1,
        DEAD: 1,
      });

      // An empty list, or a seq that is PENDING again, moves nothing.
      expect(await sub.transaction((tx) => tx.outbox.requeue({ seqs: [], nowNs: T0 }))).toBe(0);
      expect(await sub.transaction((tx) => tx.outbox.requeue({ seqs: [1], nowNs: T0 }))).toBe(0);
      expect(await sub.transaction((tx) => tx.outbox.list({}))).toEqual(after);
    });

    it("requeue all moves every DEAD item and nothing else", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, range(0, 6));
      await claim(sub, "relay-a", 4);
      await sub.transaction(async (tx) => {
        await tx.outbox.ack("relay-a", [1]);
        for (const seq of [0, 2, 3]) await tx.outbox.fail("relay-a", seq, `gave up on ${seq}`, true);
      });
      await claim(sub, "relay-b", 1, T0 + 1);
      const before = await sub.transaction((tx) => tx.outbox.list({}));
      const requeuedAt = T0 + 7;
      expect(await sub.transaction((tx) => tx.outbox.requeue({ all: true, nowNs: requeuedAt }))).toBe(3);
      const after = await sub.transaction((tx) => tx.outbox.list({}));
      expect(after.filter((i) => [0, 2, 3].includes(i.seq))).toEqual(
        [0, 2, 3].map((seq) => queued(seq, { last_error: `requeued at ${requeuedAt}: gave up on ${seq}` })),
      );
      // The DELIVERED item, relay-b's lease and the item nobody claimed are as they were.
      expect(after.filter((i) => ![0, 2, 3].includes(i.seq))).toEqual(
        before.filter((i) => ![0, 2, 3].includes(i.seq)),
      );
      expect(await sub.transaction((tx) => tx.outbox.counts())).toEqual({
        PENDING: 5,
        DELIVERED: 1,
        DEAD: 0,
      });
      expect(await sub.transaction((tx) => tx.outbox.requeue({ all: true, nowNs: requeuedAt + 1 }))).toBe(0);
      expect(await sub.transaction((tx) => tx.outbox.list({}))).toEqual(after);
    });

    it("a requeued item is claimed and acked like a new one; its old holder can no longer settle it", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, [0, 1]);
      await claim(sub, "relay-a", 2);
      await sub.transaction(async (tx) => {
        await tx.outbox.fail("relay-a", 0, "HTTP 401", true);
        await tx.outbox.ack("relay-a", [1]);
      });
      expect(await sub.transaction((tx) => tx.outbox.requeue({ seqs: [0], nowNs: T0 + 1 }))).toBe(1);
      // relay-a held it before it died; the requeue freed it, so relay-a's late settlements do nothing.
      expect(await sub.transaction((tx) => tx.outbox.ack("relay-a", [0]))).toBe(0);
      await sub.transaction((tx) => tx.outbox.fail("relay-a", 0, "late", true));

      const [again] = await claim(sub, "relay-b", 10, T0 + 2);
      expect(again).toEqual(
        queued(0, {
          attempts: 1,
          claimed_by: "relay-b",
          lease_until_ns: T0 + 2 + LEASE_NS,
          last_error: `requeued at ${T0 + 1}: HTTP 401`,
        }),
      );
      expect(await sub.transaction((tx) => tx.outbox.ack("relay-b", [0]))).toBe(1);
      const delivered = await sub.transaction((tx) => tx.outbox.list({ status: "DELIVERED" }));
      // Delivered, it keeps the reason it once died for, as ack keeps any last_error.
      expect(delivered[0]).toEqual({ ...again, status: "DELIVERED", lease_until_ns: null });
      expect(await sub.transaction((tx) => tx.outbox.counts())).toEqual({
        PENDING: 0,
        DELIVERED: 2,
        DEAD: 0,
      });
      expect(await claim(sub, "relay-c", 10, T0 + 100 * LEASE_NS)).toEqual([]);
    });

    it("a rolled-back requeue leaves the DEAD items as they were", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, range(0, 3));
      await claim(sub, "relay-a", 3);
      await sub.transaction(async (tx) => {
        for (const seq of range(0, 3)) await tx.outbox.fail("relay-a", seq, "HTTP 401", true);
      });
      const before = await sub.transaction((tx) => tx.outbox.list({}));
      const boom = new Error("boom");
      await expect(
        sub.transaction(async (tx) => {
          expect(await tx.outbox.requeue({ seqs: [0], nowNs: T0 })).toBe(1);
          expect(await tx.outbox.requeue({ all: true, nowNs: T0 })).toBe(2);
          // Inside the transaction the requeued items are claimable at once.
          expect(
            seqsOf(await tx.outbox.claim({ relayId: "relay-b", limit: 5, nowNs: T0, leaseNs: LEASE_NS })),
          ).toEqual([0, 1, 2]);
          throw boom;
        }),
      ).rejects.toBe(boom);
      expect(await sub.transaction((tx) => tx.outbox.list({}))).toEqual(before);
      expect(await sub.transaction((tx) => tx.outbox.counts())).toEqual({
        PENDING: 0,
        DELIVERED: 0,
        DEAD: 3,
      });
    });

    it("requeue without exactly one of all: true and seqs rejects with a TypeError and changes nothing", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, [0]);
      await claim(sub, "relay-a", 1);
      await sub.transaction((tx) => tx.outbox.fail("relay-a", 0, "HTTP 401", true));
      const before = await sub.transaction((tx) => tx.outbox.list({}));
      await sub.transaction(async (tx) => {
        await expect(tx.outbox.requeue({ nowNs: T0 })).rejects.toThrow(TypeError);
        await expect(tx.outbox.requeue({ all: false, nowNs: T0 })).rejects.toThrow(TypeError);
        await expect(tx.outbox.requeue({ all: true, seqs: [0], nowNs: T0 })).rejects.toThrow(TypeError);
        await expect(tx.outbox.requeue({ all: true, seqs: [], nowNs: T0 })).rejects.toThrow(TypeError);
        // A refused call leaves the transaction usable.
        expect(await tx.outbox.counts()).toEqual({ PENDING: 0, DELIVERED: 0, DEAD: 1 });
      });
      expect(await sub.transaction((tx) => tx.outbox.list({}))).toEqual(before);
      // With a selector, all: false is simply not "all".
      expect(await sub.transaction((tx) => tx.outbox.requeue({ all: false, seqs: [0], nowNs: T0 }))).toBe(1);
    });

    it("mutating returned items changes nothing stored", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await enqueue(sub, [0, 1]);
      await sub.transaction(async (tx) => {
        const [claimed] = await tx.outbox.claim({
          relayId: "relay-a",
          limit: 1,
          nowNs: T0,
          leaseNs: LEASE_NS,
        });
        claimed!.claimed_by = "someone-else";
        claimed!.status = "DELIVERED";
        for (const item of await tx.outbox.list({})) item.attempts = 99;
        const counts = await tx.outbox.counts();
        counts.PENDING = 99;
      });
      expect(await sub.transaction((tx) => tx.outbox.list({}))).toEqual([
        queued(0, { claimed_by: "relay-a", lease_until_ns: T0 + LEASE_NS, attempts: 1 }),
        queued(1),
      ]);
      expect(await sub.transaction((tx) => tx.outbox.counts())).toEqual({
        PENDING: 2,
        DELIVERED: 0,
        DEAD: 0,
      });
    });

    it("100 items, two relays on two handles claiming in concurrent batches: no seq is ever held twice", {
      timeout: CONCURRENCY_TIMEOUT_MS,
    }, async () => {
      const [a, b] = await twoHandles(await useHarness(opts));
      await enqueue(a, range(0, 100));
      const received = new Map<number, string>();
      const duplicates: string[] = [];
      let foreignAcks = 0;
      // Three workers per relay, so claims also race within one handle; leases outlive the test.
      const worker = async (sub: Substrate, relayId: string, other: string) => {
        for (let round = 0; round < 100; round++) {
          const batch = await sub.transaction(async (tx) => {
            const items = await tx.outbox.claim({ relayId, limit: 7, nowNs: T0 + round, leaseNs: LEASE_NS });
            await raceWindow(sub);
            return items;
          });
          if (batch.length === 0) return;
          for (const item of batch) {
            const holder = received.get(item.seq);
            if (holder !== undefined) duplicates.push(`${item.seq}: ${holder} and ${relayId}`);
            received.set(item.seq, relayId);
            expect(item.claimed_by).toBe(relayId);
            expect(item.attempts).toBe(1);
          }
          // The other relay acking this batch must change nothing.
          foreignAcks += await sub.transaction((tx) => tx.outbox.ack(other, seqsOf(batch)));
          const acked = await sub.transaction((tx) => tx.outbox.ack(relayId, seqsOf(batch)));
          expect(acked).toBe(batch.length);
        }
      };
      await Promise.all([
        worker(a, "relay-a", "relay-b"),
        worker(b, "relay-b", "relay-a"),
        worker(a, "relay-a", "relay-b"),
        worker(b, "relay-b", "relay-a"),
        worker(a, "relay-a", "relay-b"),
        worker(b, "relay-b", "relay-a"),
      ]);
      expect(duplicates).toEqual([]);
      expect(foreignAcks).toBe(0);
      expect([...received.keys()].sort((x, y) => x - y)).toEqual(range(0, 100));
      const final = await b.transaction(async (tx) => ({
        counts: await tx.outbox.counts(),
        delivered: await tx.outbox.list({ status: "DELIVERED" }),
      }));
      expect(final.counts).toEqual({ PENDING: 0, DELIVERED: 100, DEAD: 0 });
      for (const item of final.delivered) {
        expect(item.claimed_by).toBe(received.get(item.seq));
        expect(item.attempts).toBe(1);
      }
    });
  });
}
