// Outbox contract, the leases: claim order and limits, expiry and reclaim, ack and fail only by the holder,
// rollbacks, and two relays never holding one seq. Enqueue and requeue are other sections.

import type { Substrate } from "@leash/core";
import { expect, it } from "vitest";
import { T0 } from "./fixtures.js";
import { CONCURRENCY_TIMEOUT_MS, raceWindow, twoHandles, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";
import { claim, EPOCH_NS, enqueue, LEASE_NS, queued, range, seqsOf } from "./outbox-fixtures.js";

/** Registers the outbox tests of claiming and settling, inside the caller's `describe`. */
export function outboxLeasesContract(opts: SubstrateContractOptions): void {
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
}
