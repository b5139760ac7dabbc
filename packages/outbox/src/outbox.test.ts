// The outbox helpers on the three real substrates: transactional enqueue, exclusive leases, crash recovery.
// Delivery and sinks are @leash/relay's tests; these stop at who holds which item and what it carries.

import type { Substrate } from "@leash/core";
import { afterEach, describe, expect, it } from "vitest";
import { appendEntries, KINDS, makeEntry, manualClock, openStore, type Store } from "../test/support.js";
import { OutboxError } from "./errors.js";
import {
  ackBatch,
  claimBatch,
  enqueueEntry,
  failItem,
  outboxStats,
  requeueDead,
  settleBatch,
  systemClock,
} from "./outbox.js";

const LEASE_MS = 150;
const stores: Store[] = [];

afterEach(async () => {
  await Promise.allSettled(stores.splice(0).map((s) => s.close()));
});

async function store(kind: (typeof KINDS)[number]): Promise<Store> {
  const s = await openStore(kind);
  stores.push(s);
  return s;
}

const seqs = (items: readonly { seq: number }[]) => items.map((i) => i.seq);
const countsOf = (sub: Substrate) => sub.transaction((tx) => tx.outbox.counts());

describe.each(KINDS)("outbox on %s", (kind) => {
  it("enqueueEntry commits and rolls back with the transaction that appends the entry", async () => {
    const { substrate } = await store(kind);
    const entry = makeEntry(0, "0".repeat(64), "s1", 1);
    const boom = new Error("engine failed after enqueue");
    await expect(
      substrate.transaction(async (tx) => {
        await tx.chain.append(entry);
        await enqueueEntry(tx, entry);
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(await substrate.transaction((tx) => tx.chain.count())).toBe(0);
    expect(await countsOf(substrate)).toEqual({ PENDING: 0, DELIVERED: 0, DEAD: 0 });

    await substrate.transaction(async (tx) => {
      await tx.chain.append(entry);
      await enqueueEntry(tx, entry);
    });
    const [item] = await substrate.transaction((tx) => tx.outbox.list({}));
    expect(item).toMatchObject({ seq: 0, entry_id: entry.entry_id, session_id: "s1", status: "PENDING" });
  });

  it("claimBatch leases the lowest items with their entries, byte for byte, in seq order", async () => {
    const { substrate } = await store(kind);
    const appended = await appendEntries(substrate, ["a", null, "b", "c", "d"]);
    const clock = manualClock();
    const batch = await claimBatch(substrate, { relayId: "r1", limit: 3, leaseMs: LEASE_MS, clock });
    expect(seqs(batch.items)).toEqual([0, 1, 2]);
    expect(batch.entries).toEqual(appended.slice(0, 3));
    expect(batch.entries[0]!.body).toBe(appended[0]!.body);
    expect(batch.items.every((i) => i.claimed_by === "r1" && i.attempts === 1)).toBe(true);
    expect(batch.leaseUntilNs - batch.claimedNs).toBe(LEASE_MS * 1_000_000);
    expect(batch.deferred).toEqual([]);

    const rest = await claimBatch(substrate, { relayId: "r1", limit: 10, leaseMs: LEASE_MS, clock });
    expect(seqs(rest.items)).toEqual([3, 4]);
    expect(rest.entries.map((e) => e.entry_id)).toEqual([appended[3]!.entry_id, appended[4]!.entry_id]);
  });

  it("two relays claiming at once never hold the same item while it is leased", async () => {
    const store1 = await store(kind);
    const second = await store1.another();
    // One session per entry: nothing is deferred for order's sake, so every claimed item stays held.
    await appendEntries(
      store1.substrate,
      Array.from({ length: 60 }, (_, i) => `s${i}`),
    );
    const clock = manualClock();
    const held = { r1: new Set<number>(), r2: new Set<number>() };
    for (let round = 0; round < 6; round++) {
      const [b1, b2] = await Promise.all([
        claimBatch(store1.substrate, { relayId: "r1", limit: 7, leaseMs: LEASE_MS, clock }),
        claimBatch(second, { relayId: "r2", limit: 7, leaseMs: LEASE_MS, clock }),
      ]);
      for (const seq of seqs(b1.items)) held.r1.add(seq);
      for (const seq of seqs(b2.items)) held.r2.add(seq);
    }
    const overlap = [...held.r1].filter((seq) => held.r2.has(seq));
    expect(overlap).toEqual([]);
    expect(held.r1.size + held.r2.size).toBe(60);
    // Everything is leased: a third relay gets nothing until the leases run out.
    const third = await claimBatch(second, { relayId: "r3", limit: 100, leaseMs: LEASE_MS, clock });
    expect(third.items).toEqual([]);
    clock.advanceMs(LEASE_MS);
    const after = await claimBatch(second, { relayId: "r3", limit: 100, leaseMs: LEASE_MS, clock });
    expect(after.items).toHaveLength(60);
  });

  it("a relay that dies mid-batch loses nothing: another reclaims after the lease and delivers", async () => {
    const store1 = await store(kind);
    const other = await store1.another();
    const appended = await appendEntries(store1.substrate, ["a", "b", "a", "b"]);
    const clock = manualClock();
    const doomed = await claimBatch(store1.substrate, {
      relayId: "doomed",
      limit: 10,
      leaseMs: LEASE_MS,
      clock,
    });
    expect(doomed.items).toHaveLength(4);
    // The relay acks half, then dies: it never settles the rest.
    expect(await ackBatch(store1.substrate, "doomed", [0, 1])).toBe(2);

    clock.advanceMs(LEASE_MS - 1);
    const early = await claimBatch(other, { relayId: "heir", limit: 10, leaseMs: LEASE_MS, clock });
    expect(early.items).toEqual([]);

    clock.advanceMs(1);
    const heir = await claimBatch(other, { relayId: "heir", limit: 10, leaseMs: LEASE_MS, clock });
    expect(seqs(heir.items)).toEqual([2, 3]);
    expect(heir.items.map((i) => i.attempts)).toEqual([2, 2]);
    expect(heir.entries).toEqual(appended.slice(2));
    expect(await ackBatch(other, "heir", [2, 3])).toBe(2);

    // The dead relay's late acknowledgement (say it was only paused) takes nothing back.
    expect(await ackBatch(store1.substrate, "doomed", [2, 3])).toBe(0);
    expect(await countsOf(other)).toEqual({ PENDING: 0, DELIVERED: 4, DEAD: 0 });
  });

  it("failItem: a retry frees the item at once with its error; DEAD keeps the reason and is never claimed", async () => {
    const { substrate } = await store(kind);
    await appendEntries(substrate, ["a", "b"]);
    const clock = manualClock();
    await claimBatch(substrate, { relayId: "r1", limit: 2, leaseMs: LEASE_MS, clock });
    await failItem(substrate, "r1", 0, { error: "HTTP 503 Service Unavailable", dead: false });
    await failItem(substrate, "r1", 1, { error: "HTTP 422: rejected", dead: true });
    // Another relay may not fail what it does not hold.
    await failItem(substrate, "intruder", 0, { error: "not mine", dead: true });

    const items = await substrate.transaction((tx) => tx.outbox.list({}));
    expect(items[0]).toMatchObject({
      status: "PENDING",
      claimed_by: null,
      last_error: "HTTP 503 Service Unavailable",
    });
    expect(items[1]).toMatchObject({ status: "DEAD", last_error: "HTTP 422: rejected" });

    const again = await claimBatch(substrate, { relayId: "r2", limit: 10, leaseMs: LEASE_MS, clock });
    expect(seqs(again.items)).toEqual([0]);
    expect(again.items[0]!.attempts).toBe(2);
  });

  it("settleBatch acks, retries and kills in one transaction, and only what the relay holds", async () => {
    const { substrate } = await store(kind);
    await appendEntries(substrate, ["a", "a", "b", "c", "d"]);
    const clock = manualClock();
    await claimBatch(substrate, { relayId: "r1", limit: 4, leaseMs: LEASE_MS, clock });
    const { acked } = await settleBatch(substrate, "r1", {
      delivered: [0, 1, 4],
      retry: [{ seq: 2, error: "x".repeat(5000) }],
      dead: [{ seq: 3, error: "permanent" }],
    });
    // seq 4 was never claimed by r1, so only two acks land.
    expect(acked).toBe(2);
    const items = await substrate.transaction((tx) => tx.outbox.list({}));
    expect(items.map((i) => i.status)).toEqual(["DELIVERED", "DELIVERED", "PENDING", "DEAD", "PENDING"]);
    // A huge error is kept, but cut short.
    expect(items[2]!.last_error!.length).toBe(2000);
    expect(items[3]!.last_error).toBe("permanent");
  });

  it("defers a session's items that would overtake its older item held by another relay", async () => {
    const store1 = await store(kind);
    await appendEntries(store1.substrate, ["s", "t", "s", "t", "u", "s"]);
    const clock = manualClock();
    const first = await claimBatch(store1.substrate, { relayId: "r1", limit: 1, leaseMs: LEASE_MS, clock });
    expect(seqs(first.items)).toEqual([0]);
    const second = await claimBatch(store1.substrate, { relayId: "r2", limit: 10, leaseMs: LEASE_MS, clock });
    // Session s's seq 0 is r1's: r2 gives back 2 and 5 at once; t and u are r2's to deliver.
    expect(seqs(second.items)).toEqual([1, 3, 4]);
    expect(second.entries.map((e) => e.seq)).toEqual([1, 3, 4]);
    expect(second.deferred).toEqual([
      { seq: 2, session_id: "s", behind: { seq: 0, claimed_by: "r1", dead: false } },
      { seq: 5, session_id: "s", behind: { seq: 0, claimed_by: "r1", dead: false } },
    ]);
    const items = await store1.substrate.transaction((tx) => tx.outbox.list({}));
    // Given back untried: the lease's attempt is taken back.
    expect(items[2]).toMatchObject({
      status: "PENDING",
      claimed_by: null,
      attempts: 0,
      last_error: "waiting for seq 0 of its session (leased by r1)",
    });
    // Once r1 is done with seq 0, the deferred items are claimed again, in order.
    await ackBatch(store1.substrate, "r1", [0]);
    const third = await claimBatch(store1.substrate, { relayId: "r2", limit: 10, leaseMs: LEASE_MS, clock });
    expect(seqs(third.items)).toEqual([2, 5]);
    expect(third.deferred).toEqual([]);
  });

  it("a DEAD item holds its session's younger items back, untried, until requeued; other sessions go on", async () => {
    const { substrate } = await store(kind);
    await appendEntries(substrate, ["s", "t", "s", "t", "s"]);
    const clock = manualClock();
    await claimBatch(substrate, { relayId: "r1", limit: 1, leaseMs: LEASE_MS, clock });
    await settleBatch(substrate, "r1", { delivered: [], retry: [], dead: [{ seq: 0, error: "HTTP 400" }] });
    for (let round = 0; round < 3; round++) {
      const batch = await claimBatch(substrate, { relayId: "r2", limit: 10, leaseMs: LEASE_MS, clock });
      expect(seqs(batch.items)).toEqual(round === 0 ? [1, 3] : []);
      expect(batch.deferred).toEqual([
        { seq: 2, session_id: "s", behind: { seq: 0, claimed_by: "r1", dead: true } },
        { seq: 4, session_id: "s", behind: { seq: 0, claimed_by: "r1", dead: true } },
      ]);
      if (round === 0) await ackBatch(substrate, "r2", [1, 3]);
    }
    const held = await substrate.transaction((tx) => tx.outbox.list({ status: "PENDING" }));
    expect(held.map((i) => [i.seq, i.attempts, i.claimed_by, i.last_error])).toEqual([
      [2, 0, null, "waiting for seq 0 of its session, which is DEAD (requeue it to go on)"],
      [4, 0, null, "waiting for seq 0 of its session, which is DEAD (requeue it to go on)"],
    ]);
    expect(await requeueDead(substrate, { all: true, clock })).toBe(1);
    const after = await claimBatch(substrate, { relayId: "r2", limit: 10, leaseMs: LEASE_MS, clock });
    expect(seqs(after.items)).toEqual([0, 2, 4]);
    expect(after.items.map((i) => i.attempts)).toEqual([1, 1, 1]);
  });

  it("passes over a blocked session's backlog to fill the batch with other sessions' items", async () => {
    const { substrate } = await store(kind);
    await appendEntries(substrate, [...Array(12).fill("stuck"), "a", "b", "a", "b"]);
    const clock = manualClock();
    await claimBatch(substrate, { relayId: "r1", limit: 1, leaseMs: LEASE_MS, clock });
    await settleBatch(substrate, "r1", { delivered: [], retry: [], dead: [{ seq: 0, error: "HTTP 400" }] });
    const batch = await claimBatch(substrate, { relayId: "r2", limit: 3, leaseMs: LEASE_MS, clock });
    expect(seqs(batch.items)).toEqual([12, 13, 14]);
    expect(seqs(batch.deferred)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    // The stuck backlog went back untried; 15 was never leased.
    const items = await substrate.transaction((tx) => tx.outbox.list({ status: "PENDING" }));
    const free = items.filter((i) => i.claimed_by === null);
    expect(free.map((i) => [i.seq, i.attempts])).toEqual(
      [...seqs(batch.deferred), 15].map((seq) => [seq, 0]),
    );
  });

  it("an item whose chain entry is missing fails the claim as corrupt and leases nothing", async () => {
    const { substrate } = await store(kind);
    await appendEntries(substrate, ["a"]);
    // Queued without its append: only a damaged store (or a caller skipping enqueueEntry's rule) does this.
    await substrate.transaction((tx) =>
      tx.outbox.enqueue({ seq: 1, entry_id: "ghost", session_id: "a", created_ns: 1 }),
    );
    const clock = manualClock();
    const error = await claimBatch(substrate, { relayId: "r1", limit: 10, leaseMs: LEASE_MS, clock }).catch(
      (e: unknown) => e,
    );
    expect(OutboxError.isInstance(error) && error.code).toBe("corrupt");
    const items = await substrate.transaction((tx) => tx.outbox.list({}));
    expect(items.map((i) => [i.claimed_by, i.attempts])).toEqual([
      [null, 0],
      [null, 0],
    ]);
  });

  it("requeueDead brings DEAD items back, by seq or all, and a relay then delivers them in session order", async () => {
    const { substrate } = await store(kind);
    await appendEntries(substrate, ["a", "a", "b", "c", "a"]);
    const clock = manualClock();
    await claimBatch(substrate, { relayId: "r1", limit: 5, leaseMs: LEASE_MS, clock });
    await settleBatch(substrate, "r1", {
      delivered: [3],
      retry: [],
      dead: [
        { seq: 0, error: "HTTP 401 Unauthorized: bad signature" },
        { seq: 1, error: "HTTP 401 Unauthorized: bad signature" },
        { seq: 2, error: "HTTP 400" },
        { seq: 4, error: "HTTP 401 Unauthorized: bad signature" },
      ],
    });
    clock.advanceMs(1);
    // By seq: only DEAD ones move (3 is DELIVERED), each once.
    expect(await requeueDead(substrate, { seqs: [2, 3, 2], clock })).toBe(1);
    const [two] = await substrate.transaction((tx) => tx.outbox.list({ status: "PENDING" }));
    expect(two).toMatchObject({
      seq: 2,
      attempts: 0,
      claimed_by: null,
      lease_until_ns: null,
      last_error: `requeued at ${clock.nowNs()}: HTTP 400`,
    });
    expect(await requeueDead(substrate, { all: true, clock })).toBe(3);
    expect(await requeueDead(substrate, { all: true, clock })).toBe(0);
    expect(await countsOf(substrate)).toEqual({ PENDING: 4, DELIVERED: 1, DEAD: 0 });

    // Requeued items are claimed like new ones, lowest first, and a fresh attempt count.
    const batch = await claimBatch(substrate, { relayId: "r2", limit: 10, leaseMs: LEASE_MS, clock });
    expect(seqs(batch.items)).toEqual([0, 1, 2, 4]);
    expect(batch.items.map((i) => i.attempts)).toEqual([1, 1, 1, 1]);
    expect(await ackBatch(substrate, "r2", seqs(batch.items))).toBe(4);
    expect(await countsOf(substrate)).toEqual({ PENDING: 0, DELIVERED: 5, DEAD: 0 });
  });

  it("outboxStats counts outcomes and measures the oldest pending item's age", async () => {
    const { substrate } = await store(kind);
    const clock = manualClock();
    expect(await outboxStats(substrate, { clock })).toEqual({
      counts: { PENDING: 0, DELIVERED: 0, DEAD: 0 },
      oldestPending: null,
      oldestPendingAgeMs: null,
    });
    await appendEntries(substrate, ["a", "b", "c"], clock.nowNs());
    await claimBatch(substrate, { relayId: "r1", limit: 2, leaseMs: LEASE_MS, clock });
    await settleBatch(substrate, "r1", { delivered: [0], retry: [], dead: [{ seq: 1, error: "gone" }] });
    clock.advanceMs(2500);
    expect(await outboxStats(substrate, { clock })).toEqual({
      counts: { PENDING: 1, DELIVERED: 1, DEAD: 1 },
      oldestPending: { seq: 2, created_ns: clock.nowNs() - 2_500_000_000 },
      oldestPendingAgeMs: 2500,
    });
  });
});

describe("outbox arguments", () => {
  it("rejects an empty relay id, a non-positive limit or lease with invalid_argument", async () => {
    const { substrate } = await store("memory");
    const clock = systemClock;
    const codes = await Promise.all(
      [
        claimBatch(substrate, { relayId: " ", limit: 1, leaseMs: 100, clock }),
        claimBatch(substrate, { relayId: "r", limit: 0, leaseMs: 100, clock }),
        claimBatch(substrate, { relayId: "r", limit: 1, leaseMs: 0, clock }),
      ].map((p) =>
        p.then(
          () => "resolved",
          (e: unknown) => (OutboxError.isInstance(e) ? e.code : String(e)),
        ),
      ),
    );
    expect(codes).toEqual(["invalid_argument", "invalid_argument", "invalid_argument"]);
  });

  it("requeueDead needs exactly one of all: true and seqs, and seqs that are seqs", async () => {
    const { substrate } = await store("memory");
    await appendEntries(substrate, ["a"]);
    const clock = manualClock();
    await claimBatch(substrate, { relayId: "r", limit: 1, leaseMs: 100, clock });
    await failItem(substrate, "r", 0, { error: "HTTP 401", dead: true });
    const codes = await Promise.all(
      [
        requeueDead(substrate, {}),
        requeueDead(substrate, { all: false }),
        requeueDead(substrate, { all: true, seqs: [0] }),
        requeueDead(substrate, { seqs: [-1] }),
        requeueDead(substrate, { seqs: [0.5] }),
        requeueDead(substrate, { seqs: "0" as unknown as number[] }),
      ].map((p) =>
        p.then(
          () => "resolved",
          (e: unknown) => (OutboxError.isInstance(e) ? e.code : String(e)),
        ),
      ),
    );
    expect(codes).toEqual(Array(6).fill("invalid_argument"));
    expect(await countsOf(substrate)).toEqual({ PENDING: 0, DELIVERED: 0, DEAD: 1 });
    expect(await requeueDead(substrate, { seqs: [] })).toBe(0);
    // Without a clock the system clock stamps it.
    expect(await requeueDead(substrate, { seqs: [0] })).toBe(1);
    const [item] = await substrate.transaction((tx) => tx.outbox.list({}));
    const stamped = BigInt(/^requeued at (\d+): HTTP 401$/.exec(item!.last_error ?? "")![1]!);
    expect(Math.abs(Number(stamped / 1_000_000n) - Date.now())).toBeLessThan(1000);
  });

  it("systemClock gives integral epoch nanoseconds that never go backwards", () => {
    const a = systemClock.nowNs();
    const b = systemClock.nowNs();
    expect(Number.isInteger(a) && b >= a).toBe(true);
    expect(Math.abs(a / 1e6 - Date.now())).toBeLessThan(1000);
  });
});
