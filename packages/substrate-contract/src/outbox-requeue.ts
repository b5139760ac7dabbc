// Outbox contract, the requeue: DEAD items back to PENDING by seqs or all, claimed afresh, rollbacks, and
// the argument check. Enqueue and leases are other sections.

import { expect, it } from "vitest";
import { T0 } from "./fixtures.js";
import { useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";
import { claim, EPOCH_NS, enqueue, LEASE_NS, queued, range, seqsOf } from "./outbox-fixtures.js";

/** Registers the outbox tests of requeueing DEAD items, inside the caller's `describe`. */
export function outboxRequeueContract(opts: SubstrateContractOptions): void {
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
}
