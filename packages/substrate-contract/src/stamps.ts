// Contract tests for the snapshot stamps (`at_seq` on sessions, accounts, holds and HITL requests) and for
// heartbeats (`touch`), the one session field `update` leaves alone. Which stamp is written is the engine's.

import type { Substrate } from "@leash/core";
import { describe, expect, it } from "vitest";
import {
  MAX_SAFE_NS,
  makeAccount,
  makeHitlRequest,
  makeReservation,
  makeSession,
  seedWorld,
  T0,
} from "./fixtures.js";
import { expectSubstrateError, twoHandles, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

/** Stamps a store must give back exactly: none yet, the first entry, and positions far beyond 2^53. */
export const STAMPS = [null, 0, 1, MAX_SAFE_NS, 2 ** 62, 2 ** 63 - 1024] as const;

const heartbeatOf = (sub: Substrate, id: string) =>
  sub.transaction(async (tx) => (await tx.sessions.get(id))?.last_heartbeat_ns);

export function snapshotStampsContract(opts: SubstrateContractOptions): void {
  describe("snapshot stamps (at_seq)", () => {
    it("a session's at_seq round-trips through insert, get, list and update (null and large values)", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const records = STAMPS.map((at_seq, i) => makeSession(`s${i}`, { at_seq }));
      await sub.transaction(async (tx) => {
        for (const r of records) await tx.sessions.insert(r);
      });
      const got = await sub.transaction(async (tx) =>
        Promise.all(records.map((r) => tx.sessions.get(r.session_id))),
      );
      expect(got).toEqual(records);
      expect(got.map((r) => r?.at_seq)).toEqual([...STAMPS]);
      const listed = await sub.transaction((tx) => tx.sessions.list());
      expect(new Map(listed.map((r) => [r.session_id, r.at_seq]))).toEqual(
        new Map(records.map((r) => [r.session_id, r.at_seq])),
      );
      // Each stamp moves to the next one, the last back to null.
      const moved = records.map((r, i) => ({ ...r, at_seq: STAMPS[(i + 1) % STAMPS.length]! }));
      await sub.transaction(async (tx) => {
        for (const r of moved) await tx.sessions.update(r);
      });
      expect(
        await sub.transaction(async (tx) => Promise.all(moved.map((r) => tx.sessions.get(r.session_id)))),
      ).toEqual(moved);
    });

    it("an account's at_seq round-trips through insertAccount, getAccount and updateAccount (null and large values)", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const accounts = STAMPS.map((at_seq, i) => makeAccount(`a${i}`, { at_seq }));
      await sub.transaction(async (tx) => {
        for (const a of accounts) await tx.budgets.insertAccount(a);
      });
      const got = await sub.transaction(async (tx) =>
        Promise.all(accounts.map((a) => tx.budgets.getAccount(a.account_id))),
      );
      expect(got).toEqual(accounts);
      expect(got.map((a) => a?.at_seq)).toEqual([...STAMPS]);
      const moved = accounts.map((a, i) => ({
        ...a,
        spent_usd: "0.5",
        at_seq: STAMPS[(i + 1) % STAMPS.length]!,
      }));
      await sub.transaction(async (tx) => {
        for (const a of moved) await tx.budgets.updateAccount(a);
      });
      // Read back in a transaction of its own and in the writing one (a store may answer from what it holds).
      expect(
        await sub.transaction(async (tx) =>
          Promise.all(moved.map((a) => tx.budgets.getAccount(a.account_id))),
        ),
      ).toEqual(moved);
      const again = { ...moved[0]!, at_seq: 77 };
      const inTx = await sub.transaction(async (tx) => {
        await tx.budgets.getAccount(again.account_id);
        await tx.budgets.updateAccount(again);
        return tx.budgets.getAccount(again.account_id);
      });
      expect(inTx).toEqual(again);
    });

    // Schema version 13. A row written without a stamp (absent or null) reads back without one
    // (absent or null); a stamp written is returned exactly, by get, list and after an update.
    const GIVEN = STAMPS.filter((s) => s !== null);
    it("a hold's at_seq round-trips through insertReservation, writeBatch, get, list and update", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const holds = GIVEN.map((at_seq, i) => makeReservation(`r${i}`, { at_seq }));
      const batched = makeReservation("r-batch", { at_seq: 5 });
      const bare = makeReservation("r-bare");
      await sub.transaction(async (tx) => {
        for (const r of [...holds, bare]) await tx.budgets.insertReservation(r);
        await tx.writeBatch({ entries: [], outbox: [], reservations: [batched], sessions: [], accounts: [] });
      });
      const got = await sub.transaction(async (tx) =>
        Promise.all([...holds, batched].map((r) => tx.budgets.getReservation(r.reservation_id))),
      );
      expect(got).toEqual([...holds, batched]);
      const listed = await sub.transaction((tx) => tx.budgets.listReservations({}));
      expect(listed.find((r) => r.reservation_id === "r1")?.at_seq).toBe(GIVEN[1]);
      const none = await sub.transaction((tx) => tx.budgets.getReservation("r-bare"));
      expect(none?.at_seq ?? null).toBeNull();
      const moved = { ...holds[0]!, status: "SETTLED" as const, actual_usd: "0.25", at_seq: 9 };
      await sub.transaction((tx) => tx.budgets.updateReservation(moved));
      expect(await sub.transaction((tx) => tx.budgets.getReservation(moved.reservation_id))).toEqual(moved);
    });

    it("a HITL request's at_seq round-trips through insert, get, list and update", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const requests = GIVEN.map((at_seq, i) => makeHitlRequest(`h${i}`, { at_seq }));
      await sub.transaction(async (tx) => {
        for (const r of requests) await tx.hitl.insert(r);
        await tx.hitl.insert(makeHitlRequest("h-bare"));
      });
      expect(
        await sub.transaction((tx) => Promise.all(requests.map((r) => tx.hitl.get(r.request_id)))),
      ).toEqual(requests);
      const listed = await sub.transaction((tx) => tx.hitl.list({}));
      expect(listed.find((r) => r.request_id === "h2")?.at_seq).toBe(GIVEN[2]);
      expect(listed.find((r) => r.request_id === "h-bare")?.at_seq ?? null).toBeNull();
      const decided = { ...requests[0]!, status: "DECIDED" as const, decision: "approve", at_seq: 11 };
      await sub.transaction((tx) => tx.hitl.update(decided));
      expect(await sub.transaction((tx) => tx.hitl.get(decided.request_id))).toEqual(decided);
    });
  });

  describe("heartbeats (touch) and update", () => {
    it("touch writes the heartbeat and nothing else, and is seen in its own transaction", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const record = makeSession("s1", { last_heartbeat_ns: T0 + 1, at_seq: 5 });
      const other = makeSession("s2", { last_heartbeat_ns: T0 + 2 });
      await sub.transaction(async (tx) => {
        await tx.sessions.insert(record);
        await tx.sessions.insert(other);
      });
      const inTx = await sub.transaction(async (tx) => {
        await tx.sessions.get("s1");
        await tx.sessions.touch("s1", T0 + 50);
        return tx.sessions.get("s1");
      });
      expect(inTx).toEqual({ ...record, last_heartbeat_ns: T0 + 50 });
      expect(await sub.transaction((tx) => tx.sessions.get("s1"))).toEqual({
        ...record,
        last_heartbeat_ns: T0 + 50,
      });
      expect(await sub.transaction((tx) => tx.sessions.get("s2"))).toEqual(other);
      // A heartbeat may be written without reading the row first, and far beyond 2^53.
      await sub.transaction((tx) => tx.sessions.touch("s2", 2 ** 62));
      expect(await sub.transaction((tx) => tx.sessions.get("s2"))).toEqual({
        ...other,
        last_heartbeat_ns: 2 ** 62,
      });
    });

    it('touch of an unknown id fails with code "not_found" and creates nothing', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await expectSubstrateError(
        sub.transaction((tx) => tx.sessions.touch("ghost", T0)),
        "not_found",
      );
      expect(await sub.transaction((tx) => tx.sessions.list())).toEqual([]);
    });

    it("update leaves the stored heartbeat as it is: a writer holding an older copy cannot move it back", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const record = makeSession("s1", { last_heartbeat_ns: T0 + 1 });
      await sub.transaction((tx) => tx.sessions.insert(record));
      // An older copy, held across a heartbeat written meanwhile (the engine keeps sessions in memory).
      const held = (await sub.transaction((tx) => tx.sessions.get("s1")))!;
      await sub.transaction((tx) => tx.sessions.touch("s1", T0 + 9));
      const next = { ...held, call_count: 4, updated_ns: T0 + 10, at_seq: 42 };
      await sub.transaction((tx) => tx.sessions.update(next));
      expect(await sub.transaction((tx) => tx.sessions.get("s1"))).toEqual({
        ...next,
        last_heartbeat_ns: T0 + 9,
      });
      // Neither a different value nor null in the record written moves it; nor does a status change.
      await sub.transaction((tx) =>
        tx.sessions.update({ ...next, status: "STALE", last_heartbeat_ns: T0 + 1_000 }),
      );
      expect(await heartbeatOf(sub, "s1")).toBe(T0 + 9);
      await sub.transaction((tx) =>
        tx.sessions.update({ ...next, status: "ACTIVE", last_heartbeat_ns: null }),
      );
      expect(await heartbeatOf(sub, "s1")).toBe(T0 + 9);
      expect((await sub.transaction((tx) => tx.sessions.get("s1")))?.status).toBe("ACTIVE");
    });

    it("update in the transaction of a touch keeps the touched heartbeat, read back in it and after", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await sub.transaction((tx) => tx.sessions.insert(makeSession("s1", { last_heartbeat_ns: T0 })));
      const inTx = await sub.transaction(async (tx) => {
        const before = (await tx.sessions.get("s1"))!;
        await tx.sessions.touch("s1", T0 + 7);
        await tx.sessions.update({ ...before, call_count: 9 });
        return tx.sessions.get("s1");
      });
      expect(inTx?.last_heartbeat_ns).toBe(T0 + 7);
      expect(inTx?.call_count).toBe(9);
      const after = await sub.transaction((tx) => tx.sessions.get("s1"));
      expect(after?.last_heartbeat_ns).toBe(T0 + 7);
      expect(after?.call_count).toBe(9);
    });

    it("a heartbeat written through another handle survives an update from a handle that read the row before", async () => {
      const harness = await useHarness(opts);
      const [a, b] = await twoHandles(harness);
      await a.transaction((tx) => tx.sessions.insert(makeSession("s1", { last_heartbeat_ns: T0 })));
      // a reads (and may cache) the row; b writes a heartbeat; a writes its copy back.
      const held = (await a.transaction((tx) => tx.sessions.get("s1")))!;
      await b.transaction((tx) => tx.sessions.touch("s1", T0 + 30));
      await a.transaction(async (tx) => {
        const row = (await tx.sessions.get("s1"))!;
        expect(row.last_heartbeat_ns).toBe(T0 + 30);
        await tx.sessions.update({ ...held, call_count: held.call_count + 1 });
      });
      for (const sub of [a, b]) {
        const row = await sub.transaction((tx) => tx.sessions.get("s1"));
        expect(row?.last_heartbeat_ns).toBe(T0 + 30);
        expect(row?.call_count).toBe(held.call_count + 1);
      }
    });

    it("touches and updates queued together keep every update and the heartbeat", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await sub.transaction((tx) => tx.sessions.insert(makeSession("s1", { last_heartbeat_ns: T0 })));
      const bump = () =>
        sub.transaction(async (tx) => {
          const row = (await tx.sessions.get("s1"))!;
          await tx.sessions.update({ ...row, call_count: row.call_count + 1, at_seq: row.call_count });
        });
      const touch = (atNs: number) =>
        sub.transaction(async (tx) => {
          await tx.sessions.get("s1");
          await tx.sessions.touch("s1", atNs);
        });
      await Promise.all([bump(), touch(T0 + 20), bump(), bump()]);
      const row = await sub.transaction((tx) => tx.sessions.get("s1"));
      expect(row?.last_heartbeat_ns).toBe(T0 + 20);
      expect(row?.call_count).toBe(makeSession("s1").call_count + 3);
    });

    it("touch rolls back with its transaction", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const record = makeSession("s1", { last_heartbeat_ns: T0 });
      await sub.transaction((tx) => tx.sessions.insert(record));
      const boom = new Error("boom");
      await expect(
        sub.transaction(async (tx) => {
          await tx.sessions.get("s1");
          await tx.sessions.touch("s1", T0 + 5);
          await tx.sessions.update({ ...record, call_count: 99 });
          throw boom;
        }),
      ).rejects.toBe(boom);
      expect(await sub.transaction((tx) => tx.sessions.get("s1"))).toEqual(record);
      // Without a read first, too.
      await expect(
        sub.transaction(async (tx) => {
          await tx.sessions.touch("s1", T0 + 6);
          throw boom;
        }),
      ).rejects.toBe(boom);
      expect(await sub.transaction((tx) => tx.sessions.get("s1"))).toEqual(record);
    });
  });
}
