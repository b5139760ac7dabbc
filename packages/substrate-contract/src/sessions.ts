// Contract tests for the SessionStore: round trips, conflict / not_found codes, list filters and limit.
// Locking under contention is covered in concurrency.ts, copy semantics in copies.ts.

import type { SessionRecord } from "@leash/core";
import { describe, expect, it } from "vitest";
import { makeSession, T0 } from "./fixtures.js";
import { byKey, expectSubstrateError, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

const ids = (rows: readonly SessionRecord[]) => rows.map((r) => r.session_id).sort();

export function sessionStoreContract(opts: SubstrateContractOptions): void {
  describe("sessions", () => {
    it("get returns null for an unknown id", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      expect(await sub.transaction((tx) => tx.sessions.get("no-such-session"))).toBeNull();
    });

    it("insert then get round-trips every field (config/state JSON, nonce types, nulls, unicode id)", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const record = makeSession("sess-ünï-😀-'\"-\\", {
        status: "PAUSED",
        last_heartbeat_ns: T0 + 99,
        state: {
          ...makeSession("x").state,
          circuit_tripped: true,
          circuit_trip_reason: "max_repeat_exceeded",
          circuit_tripped_at_ns: T0 + 7,
          pending_transition: {
            decision: "modify",
            original_nonce: 7,
            successor_nonce: "7",
            resume_attempt: false,
          },
          pending_request: { nonce: "n-9", args_digest: null, tool_name: "search", reason: "hitl_all_calls" },
        },
      });
      await sub.transaction((tx) => tx.sessions.insert(record));
      const got = await sub.transaction((tx) => tx.sessions.get(record.session_id));
      expect(got).toEqual(record);
      expect(got?.state.pending_transition?.original_nonce).toBe(7);
      expect(got?.state.pending_transition?.successor_nonce).toBe("7");
      expect(got?.last_heartbeat_ns).toBe(T0 + 99);
      expect(await sub.transaction((tx) => tx.sessions.get("sess-ünï-😀-'\"-/"))).toBeNull();
    });

    it('insert of an existing id fails with code "conflict" and keeps the first record', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const first = makeSession("s1");
      await sub.transaction((tx) => tx.sessions.insert(first));
      await expectSubstrateError(
        sub.transaction((tx) => tx.sessions.insert(makeSession("s1", { agent_id: "intruder" }))),
        "conflict",
      );
      expect(await sub.transaction((tx) => tx.sessions.get("s1"))).toEqual(first);
    });

    it("update replaces the stored record (all but the heartbeat: see stamps.ts)", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await sub.transaction((tx) => tx.sessions.insert(makeSession("s1")));
      const next = makeSession("s1", {
        status: "TERMINATED",
        call_count: 4,
        updated_ns: T0 + 4,
        at_seq: 57,
        state: { status: "TERMINATED", total_calls: 4, repeat_counts: { search: 3 } },
      });
      await sub.transaction((tx) => tx.sessions.update(next));
      const got = await sub.transaction((tx) => tx.sessions.get("s1"));
      expect(got).toEqual(next);
      // The old state's keys must be gone, not merged into the new state.
      expect(got?.state.last_tool_name).toBeUndefined();
    });

    it('update of an unknown id fails with code "not_found" and creates nothing', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await expectSubstrateError(
        sub.transaction((tx) => tx.sessions.update(makeSession("ghost"))),
        "not_found",
      );
      expect(await sub.transaction((tx) => tx.sessions.get("ghost"))).toBeNull();
      expect(await sub.transaction((tx) => tx.sessions.list())).toEqual([]);
    });

    it("list without a filter returns every session, equal to what was written", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      expect(await sub.transaction((tx) => tx.sessions.list())).toEqual([]);
      const records = [
        makeSession("a", { status: "ACTIVE" }),
        makeSession("b", { status: "PAUSED" }),
        makeSession("c", { status: "TERMINATED" }),
      ];
      await sub.transaction(async (tx) => {
        for (const r of records) await tx.sessions.insert(r);
      });
      const listed = await sub.transaction((tx) => tx.sessions.list());
      expect(byKey(listed, (r) => r.session_id)).toEqual(records);
      expect(await sub.transaction((tx) => tx.sessions.list({}))).toHaveLength(3);
    });

    it("list filters by status", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await sub.transaction(async (tx) => {
        await tx.sessions.insert(makeSession("a1", { status: "ACTIVE" }));
        await tx.sessions.insert(makeSession("p1", { status: "PAUSED" }));
        await tx.sessions.insert(makeSession("a2", { status: "ACTIVE" }));
        // state.status disagrees on purpose: the filter reads the record's status column.
        await tx.sessions.insert(makeSession("s1", { status: "STALE", state: { status: "ACTIVE" } }));
      });
      expect(ids(await sub.transaction((tx) => tx.sessions.list({ status: "ACTIVE" })))).toEqual([
        "a1",
        "a2",
      ]);
      expect(ids(await sub.transaction((tx) => tx.sessions.list({ status: "PAUSED" })))).toEqual(["p1"]);
      expect(ids(await sub.transaction((tx) => tx.sessions.list({ status: "STALE" })))).toEqual(["s1"]);
      expect(await sub.transaction((tx) => tx.sessions.list({ status: "TERMINATED" }))).toEqual([]);
    });

    it("list honours limit, with and without a status filter", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await sub.transaction(async (tx) => {
        for (const id of ["a1", "a2", "a3"]) await tx.sessions.insert(makeSession(id, { status: "ACTIVE" }));
        for (const id of ["p1", "p2"]) await tx.sessions.insert(makeSession(id, { status: "PAUSED" }));
      });
      const two = await sub.transaction((tx) => tx.sessions.list({ limit: 2 }));
      expect(two).toHaveLength(2);
      expect(new Set(ids(two)).size).toBe(2);
      const active = await sub.transaction((tx) => tx.sessions.list({ status: "ACTIVE", limit: 2 }));
      expect(active).toHaveLength(2);
      for (const r of active) expect(r.status).toBe("ACTIVE");
      const paused = await sub.transaction((tx) => tx.sessions.list({ status: "PAUSED", limit: 10 }));
      expect(ids(paused)).toEqual(["p1", "p2"]);
      expect(await sub.transaction((tx) => tx.sessions.list({ limit: 100 }))).toHaveLength(5);
    });
  });
}
