// Contract tests for what comes back from the stores: copies, never aliases; equal numbers; identical decimals.
// Which values a substrate accepts at all (schema validation) is not part of the port and not tested.

import { describe, expect, it } from "vitest";
import {
  MAX_SAFE_NS,
  makeAccount,
  makeHitlRequest,
  makeReservation,
  makeSession,
  seedWorld,
  T0,
  WORLD,
} from "./fixtures.js";
import { useHarness } from "./harness.js";
import { spendIn } from "./nonces.js";
import type { SubstrateContractOptions } from "./options.js";

/** Decimal strings the port promises back byte for byte: trailing zeros, many digits, beyond int64 micro-units. */
export const DECIMAL_SAMPLES = [
  "0",
  "0.001",
  "0.10",
  "1.000000",
  "1000000",
  "0.000000000000000001",
  "3.141592653589793238462643383279",
  "99999999999999999999.999999999999",
] as const;

export function valuesContract(opts: SubstrateContractOptions): void {
  describe("returned records are copies", () => {
    it("mutating a record returned by get changes nothing stored, in every store", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await sub.transaction(async (tx) => {
        await tx.budgets.insertReservation(makeReservation("r1"));
        await tx.hitl.insert(makeHitlRequest("h1"));
      });
      await sub.transaction(async (tx) => {
        const s = (await tx.sessions.get(WORLD.session1))!;
        s.call_count = 999;
        s.state.repeat_counts!.search = 999;
        s.config.budget_usd = 999;
        const a = (await tx.budgets.getAccount(WORLD.sessionAccount))!;
        a.spent_usd = "999";
        const r = (await tx.budgets.getReservation("r1"))!;
        r.status = "SETTLED";
        r.account_ids.push("acct-x");
        const h = (await tx.hitl.get("h1"))!;
        h.status = "DECIDED";
        // Inside the same transaction the stored rows are still untouched.
        expect((await tx.sessions.get(WORLD.session1))?.call_count).toBe(3);
        expect((await tx.budgets.getReservation("r1"))?.account_ids).toHaveLength(3);
      });
      const after = await sub.transaction(async (tx) => ({
        s: await tx.sessions.get(WORLD.session1),
        a: await tx.budgets.getAccount(WORLD.sessionAccount),
        r: await tx.budgets.getReservation("r1"),
        h: await tx.hitl.get("h1"),
      }));
      expect(after).toEqual({
        s: makeSession(WORLD.session1),
        a: makeAccount(WORLD.sessionAccount, { scope: "session", parent_id: WORLD.agentAccount }),
        r: makeReservation("r1"),
        h: makeHitlRequest("h1"),
      });
    });

    it("mutating records returned by list, listReservations, listExpired and hitl.list changes nothing", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await sub.transaction(async (tx) => {
        await tx.budgets.insertReservation(makeReservation("r1", { expires_ns: T0 }));
        await tx.hitl.insert(makeHitlRequest("h1"));
      });
      await sub.transaction(async (tx) => {
        for (const s of await tx.sessions.list()) {
          s.status = "TERMINATED";
          s.state.total_calls = 999;
        }
        for (const r of await tx.budgets.listReservations({})) r.account_ids.length = 0;
        for (const r of await tx.budgets.listExpired(T0, 10)) r.status = "EXPIRED";
        for (const h of await tx.hitl.list({})) h.decision = "approve";
      });
      const after = await sub.transaction(async (tx) => ({
        statuses: (await tx.sessions.list()).map((s) => [s.status, s.state.total_calls]).sort(),
        r: await tx.budgets.getReservation("r1"),
        h: await tx.hitl.get("h1"),
      }));
      expect(after.statuses).toEqual([
        ["ACTIVE", 3],
        ["PAUSED", 3],
      ]);
      expect(after.r).toEqual(makeReservation("r1", { expires_ns: T0 }));
      expect(after.h).toEqual(makeHitlRequest("h1"));
    });

    it("mutating an object after writing it changes nothing stored", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const session = makeSession("s-written");
      const account = makeAccount("a-written");
      const reservation = makeReservation("r-written");
      const request = makeHitlRequest("h-written");
      await sub.transaction(async (tx) => {
        await tx.sessions.insert(session);
        await tx.budgets.insertAccount(account);
        await tx.budgets.insertReservation(reservation);
        await tx.hitl.insert(request);
        session.state.total_calls = 999;
        account.limit_usd = "999";
        reservation.account_ids.reverse();
        request.tool_name = "mutated";
      });
      const after = await sub.transaction(async (tx) => [
        await tx.sessions.get("s-written"),
        await tx.budgets.getAccount("a-written"),
        await tx.budgets.getReservation("r-written"),
        await tx.hitl.get("h-written"),
      ]);
      expect(after).toEqual([
        makeSession("s-written"),
        makeAccount("a-written"),
        makeReservation("r-written"),
        makeHitlRequest("h-written"),
      ]);
    });
  });

  describe("numbers and decimal strings", () => {
    it("decimal strings come back as the same string (accounts and reservations)", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await sub.transaction(async (tx) => {
        for (const [i, d] of DECIMAL_SAMPLES.entries()) {
          await tx.budgets.insertAccount(
            makeAccount(`d${i}`, { limit_usd: d, spent_usd: d, reserved_usd: d }),
          );
          await tx.budgets.insertReservation(makeReservation(`d${i}`, { amount_usd: d, actual_usd: d }));
        }
      });
      const back = await sub.transaction(async (tx) => {
        const rows: string[][] = [];
        for (const i of DECIMAL_SAMPLES.keys()) {
          const a = (await tx.budgets.getAccount(`d${i}`))!;
          const r = (await tx.budgets.getReservation(`d${i}`))!;
          rows.push([a.limit_usd, a.spent_usd, a.reserved_usd, r.amount_usd, r.actual_usd!]);
        }
        return rows;
      });
      expect(back).toEqual(DECIMAL_SAMPLES.map((d) => [d, d, d, d, d]));
      for (const row of back) for (const value of row) expect(typeof value).toBe("string");
    });

    it("real epoch-nanosecond timestamps (beyond 2^53) come back exactly and order correctly", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const now = 1_796_012_406_975_000_000; // 2026-11-30 in ns: an integral double above 2^53
      const session = makeSession("s-epoch", {
        created_ns: now,
        updated_ns: now + 256,
        last_heartbeat_ns: now,
      });
      const soon = makeReservation("r-soon", { created_ns: now, expires_ns: now + 1e9 });
      const later = makeReservation("r-later", { created_ns: now, expires_ns: now + 2e9 });
      await sub.transaction(async (tx) => {
        await tx.sessions.insert(session);
        await tx.budgets.insertReservation(soon);
        await tx.budgets.insertReservation(later);
      });
      const back = await sub.transaction(async (tx) => ({
        session: await tx.sessions.get("s-epoch"),
        expired: await tx.budgets.listExpired(now + 1.5e9, 10),
      }));
      expect(back.session?.created_ns).toBe(now);
      expect(back.session?.updated_ns).toBe(now + 256);
      expect(back.expired.map((r) => r.reservation_id)).toEqual(["r-soon"]);
      expect(back.expired[0]?.expires_ns).toBe(now + 1e9);
    });

    it("numbers come back equal: 0, MAX_SAFE_INTEGER timestamps, counters and float state", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const session = makeSession("s-big", {
        call_count: MAX_SAFE_NS,
        created_ns: 0,
        updated_ns: MAX_SAFE_NS,
        last_heartbeat_ns: MAX_SAFE_NS - 1,
        config: { budget_usd: 0.1, hitl_budget_threshold: 1e-7, deny_jitter_ratio: 0.123456789012345 },
        state: {
          budget_remaining_usd: 1e21,
          budget_spent_usd: 1e-300,
          circuit_tripped_at_ns: MAX_SAFE_NS,
          window_start_ns: -1,
          total_calls: 2 ** 40,
        },
      });
      const account = makeAccount("a-big", { created_ns: 0, updated_ns: MAX_SAFE_NS });
      const reservation = makeReservation("r-big", {
        call_number: MAX_SAFE_NS,
        created_ns: MAX_SAFE_NS - 2,
        expires_ns: MAX_SAFE_NS,
        resolved_ns: 0,
        status: "RELEASED",
      });
      const request = makeHitlRequest("h-big", {
        call_number: 0,
        created_ns: MAX_SAFE_NS,
        decided_ns: MAX_SAFE_NS,
        nonce: MAX_SAFE_NS,
      });
      await sub.transaction(async (tx) => {
        await tx.sessions.insert(session);
        await tx.budgets.insertAccount(account);
        await tx.budgets.insertReservation(reservation);
        await tx.hitl.insert(request);
        await spendIn(tx, "s-big", MAX_SAFE_NS);
      });
      const back = await sub.transaction(async (tx) => ({
        session: await tx.sessions.get("s-big"),
        account: await tx.budgets.getAccount("a-big"),
        reservation: await tx.budgets.getReservation("r-big"),
        request: await tx.hitl.get("h-big"),
        nonce: await tx.nonces.has("s-big", MAX_SAFE_NS),
      }));
      expect(back).toEqual({ session, account, reservation, request, nonce: true });
      expect(back.session?.updated_ns).toBe(MAX_SAFE_NS);
      expect(typeof back.reservation?.expires_ns).toBe("number");
      expect(typeof back.session?.call_count).toBe("number");
      // A reservation that expires at MAX_SAFE_INTEGER is expired at that instant and not one before.
      await sub.transaction((tx) =>
        tx.budgets.insertReservation(makeReservation("r-max", { expires_ns: MAX_SAFE_NS })),
      );
      expect(
        (await sub.transaction((tx) => tx.budgets.listExpired(MAX_SAFE_NS - 1, 10))).map(
          (r) => r.reservation_id,
        ),
      ).not.toContain("r-max");
      expect(
        (await sub.transaction((tx) => tx.budgets.listExpired(MAX_SAFE_NS, 10))).map((r) => r.reservation_id),
      ).toContain("r-max");
    });
  });
}
