// Outbox contract, the queue: enqueue and list round-trip every field, a queued seq is not queued twice, and
// returned items are copies. Leases and requeue are other sections.

import { expect, it } from "vitest";
import { T0, WORLD } from "./fixtures.js";
import { expectSubstrateError, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";
import { EPOCH_NS, enqueue, LEASE_NS, queued, range } from "./outbox-fixtures.js";

/** Registers the outbox tests of enqueue and list, inside the caller's `describe`. */
export function outboxQueueContract(opts: SubstrateContractOptions): void {
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
}
