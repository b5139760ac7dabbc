// Contract tests for the HitlStore: round trips (nonce types kept), decisions, list filters, and one
// answer per request when answers race under the session's lock (by get of the request: concurrency.ts).

import type { HitlRequest, HitlStore, Substrate } from "@leash/core";
import { describe, expect, it } from "vitest";
import { makeHitlRequest, seedWorld, T0, WORLD } from "./fixtures.js";
import { CONCURRENCY_TIMEOUT_MS, raceWindow, twoHandles, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

const rids = (rows: readonly HitlRequest[]) => rows.map((r) => r.request_id).sort();

export function hitlStoreContract(opts: SubstrateContractOptions): void {
  describe("hitl", () => {
    it("get returns null for an unknown id", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      expect(await sub.transaction((tx) => tx.hitl.get("no-such-request"))).toBeNull();
    });

    it("insert then get round-trips every field, keeping nonce types and nulls", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const numeric = makeHitlRequest("h-num", { nonce: 7, successor_nonce: "7" });
      const stringy = makeHitlRequest("h-str", {
        nonce: "7",
        successor_nonce: 8,
        successor_args_digest: "ef".repeat(32),
        reason: "hitl_on_deny:window_exceeded",
      });
      const bare = makeHitlRequest("h-null", { nonce: null, args_digest: null, reason: "hitl_all_calls" });
      await sub.transaction(async (tx) => {
        for (const r of [numeric, stringy, bare]) await tx.hitl.insert(r);
      });
      const got = await sub.transaction(async (tx) => [
        await tx.hitl.get("h-num"),
        await tx.hitl.get("h-str"),
        await tx.hitl.get("h-null"),
      ]);
      expect(got).toEqual([numeric, stringy, bare]);
      expect(got[0]?.nonce).toBe(7);
      expect(got[0]?.successor_nonce).toBe("7");
      expect(got[1]?.nonce).toBe("7");
      expect(got[1]?.successor_nonce).toBe(8);
      expect(got[2]?.nonce).toBeNull();
    });

    it("keeps what an operator judges by: canonical params, exact budget text, policy, expiry, comment", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const paramsJson = '{"amount":"10.50","note":"żółw 🐢","to":["a","b"]}';
      const request = makeHitlRequest("h-full", {
        params_json: paramsJson,
        budget_spent_usd: "0.0010",
        budget_limit_usd: "1e-7",
        budget_remaining_usd: "0",
        policy_id: "ab".repeat(32),
        // Epoch nanoseconds beyond 2^53 and 2^62: they must come back as the same integer.
        expires_ns: 2 ** 62 + 2 ** 40,
      });
      await sub.transaction((tx) => tx.hitl.insert(request));
      expect(await sub.transaction((tx) => tx.hitl.get("h-full"))).toEqual(request);
      const answered = {
        ...request,
        status: "DECIDED" as const,
        decision: "modify",
        operator_id: "alice",
        successor_nonce: "succ-1",
        successor_args_digest: "ef".repeat(32),
        successor_params_json: '{"amount":"5"}',
        comment: "halved: over the daily limit",
        decided_ns: T0 + 90,
      };
      await sub.transaction((tx) => tx.hitl.update(answered));
      const [listed] = await sub.transaction((tx) => tx.hitl.list({ status: "DECIDED" }));
      expect(listed).toEqual(answered);
      expect(listed?.params_json).toBe(paramsJson);
      expect(listed?.budget_limit_usd).toBe("1e-7");
    });

    it("an EXPIRED request is listed by that status only", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const expired = makeHitlRequest("h-exp", {
        status: "EXPIRED",
        operator_id: "system:timeout",
        expires_ns: T0 + 10,
        decided_ns: T0 + 11,
      });
      await sub.transaction(async (tx) => {
        await tx.hitl.insert(expired);
        await tx.hitl.insert(makeHitlRequest("h-open", { expires_ns: T0 + 1e12 }));
      });
      const [pending, gone] = await sub.transaction(async (tx) => [
        await tx.hitl.list({ status: "PENDING" }),
        await tx.hitl.list({ sessionId: WORLD.session1, status: "EXPIRED" }),
      ]);
      expect(rids(pending)).toEqual(["h-open"]);
      expect(gone).toEqual([expired]);
    });

    it("update records a human's decision", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await sub.transaction((tx) => tx.hitl.insert(makeHitlRequest("h1")));
      const decided = makeHitlRequest("h1", {
        status: "DECIDED",
        decision: "modify",
        operator_id: "operator-ünï",
        successor_nonce: "n-8",
        successor_args_digest: "ef".repeat(32),
        decided_ns: T0 + 60,
      });
      await sub.transaction((tx) => tx.hitl.update(decided));
      expect(await sub.transaction((tx) => tx.hitl.get("h1"))).toEqual(decided);
    });

    it("list filters by session, by status, by both, and returns all with an empty filter", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await sub.transaction(async (tx) => {
        await tx.hitl.insert(makeHitlRequest("s1-pending", { session_id: WORLD.session1 }));
        await tx.hitl.insert(
          makeHitlRequest("s1-decided", { session_id: WORLD.session1, status: "DECIDED" }),
        );
        await tx.hitl.insert(makeHitlRequest("s2-pending", { session_id: WORLD.session2 }));
        await tx.hitl.insert(
          makeHitlRequest("s2-consumed", { session_id: WORLD.session2, status: "CONSUMED" }),
        );
      });
      const list = (filter: Parameters<HitlStore["list"]>[0]) =>
        sub.transaction((tx) => tx.hitl.list(filter));
      expect(rids(await list({}))).toEqual(["s1-decided", "s1-pending", "s2-consumed", "s2-pending"]);
      expect(rids(await list({ sessionId: WORLD.session2 }))).toEqual(["s2-consumed", "s2-pending"]);
      expect(rids(await list({ status: "PENDING" }))).toEqual(["s1-pending", "s2-pending"]);
      expect(rids(await list({ sessionId: WORLD.session1, status: "DECIDED" }))).toEqual(["s1-decided"]);
      expect(await list({ sessionId: WORLD.session1, status: "CONSUMED" })).toEqual([]);
      expect(await list({ status: "EXPIRED" })).toEqual([]);
      const [full] = await list({ sessionId: WORLD.session2, status: "CONSUMED" });
      expect(full).toEqual(
        makeHitlRequest("s2-consumed", { session_id: WORLD.session2, status: "CONSUMED" }),
      );
    });

    it("answers racing from two handles under the session's lock: the open request is answered once", {
      timeout: CONCURRENCY_TIMEOUT_MS,
    }, async () => {
      // What the engine's resume relies on: after sessions.get (which locks the row), a list of the
      // session's PENDING requests sees every answer committed before, on any handle.
      const handles = await twoHandles(await useHarness(opts));
      await seedWorld(handles[0]);
      await handles[0].transaction((tx) => tx.hitl.insert(makeHitlRequest("open")));
      const answer = (sub: Substrate, i: number) =>
        sub.transaction(async (tx) => {
          await tx.sessions.get(WORLD.session1);
          const [open] = await tx.hitl.list({ sessionId: WORLD.session1, status: "PENDING" });
          if (open === undefined) return null;
          await raceWindow(sub);
          await tx.hitl.update({ ...open, status: "DECIDED", decision: "approve", operator_id: `op-${i}` });
          return i;
        });
      const results = await Promise.allSettled(
        Array.from({ length: 8 }, (_, i) => answer(handles[i % 2]!, i)),
      );
      expect(results.filter((r) => r.status === "rejected")).toEqual([]);
      const winners = results.flatMap((r) => (r.status === "fulfilled" && r.value !== null ? [r.value] : []));
      expect(winners).toHaveLength(1);
      const stored = await handles[1].transaction((tx) => tx.hitl.get("open"));
      expect([stored?.status, stored?.operator_id]).toEqual(["DECIDED", `op-${winners[0]}`]);
    });
  });
}
