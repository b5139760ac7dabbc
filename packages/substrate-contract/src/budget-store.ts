// Contract tests for the BudgetStore rows: accounts and reservations, their codes, filters and listExpired.
// Budget arithmetic (reserve, settle, nested scopes) is budget-guard's to test, in budget.ts.

import type { BudgetStore, Reservation } from "@leash/core";
import { describe, expect, it } from "vitest";
import { makeAccount, makeReservation, seedWorld, T0, WORLD } from "./fixtures.js";
import { expectSubstrateError, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

const rids = (rows: readonly Reservation[]) => rows.map((r) => r.reservation_id).sort();

export function budgetStoreContract(opts: SubstrateContractOptions): void {
  describe("budget accounts", () => {
    it("getAccount returns null for an unknown id", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      expect(await sub.transaction((tx) => tx.budgets.getAccount("no-such-account"))).toBeNull();
    });

    it("insertAccount then getAccount round-trips every field, parent link included", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const parent = makeAccount("parent", { scope: "organization", limit_usd: "500.5" });
      const child = makeAccount("child", {
        scope: "guard",
        parent_id: "parent",
        limit_usd: "12.345678",
        spent_usd: "1.000001",
        reserved_usd: "0.25",
        created_ns: T0 + 1,
        updated_ns: T0 + 2,
      });
      await sub.transaction(async (tx) => {
        await tx.budgets.insertAccount(parent);
        await tx.budgets.insertAccount(child);
      });
      const got = await sub.transaction(async (tx) => [
        await tx.budgets.getAccount("parent"),
        await tx.budgets.getAccount("child"),
      ]);
      expect(got).toEqual([parent, child]);
    });

    it('insertAccount of an existing id fails with code "conflict" and keeps the first', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const first = makeAccount("acct", { limit_usd: "1" });
      await sub.transaction((tx) => tx.budgets.insertAccount(first));
      await expectSubstrateError(
        sub.transaction((tx) => tx.budgets.insertAccount(makeAccount("acct", { limit_usd: "999" }))),
        "conflict",
      );
      expect(await sub.transaction((tx) => tx.budgets.getAccount("acct"))).toEqual(first);
    });

    it("updateAccount replaces limit, spent, reserved and updated_ns", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await sub.transaction((tx) => tx.budgets.insertAccount(makeAccount("acct")));
      const next = makeAccount("acct", {
        limit_usd: "20",
        spent_usd: "3.141592653589793238",
        reserved_usd: "0.000001",
        updated_ns: T0 + 10,
      });
      await sub.transaction((tx) => tx.budgets.updateAccount(next));
      expect(await sub.transaction((tx) => tx.budgets.getAccount("acct"))).toEqual(next);
    });
  });

  describe("reservations", () => {
    it("getReservation returns null for an unknown id", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      expect(await sub.transaction((tx) => tx.budgets.getReservation("no-such-reservation"))).toBeNull();
    });

    it("insertReservation then getReservation round-trips every field, account order and nulls kept", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const pending = makeReservation("r1");
      const settled = makeReservation("r2", {
        account_ids: [WORLD.orgAccount],
        call_number: 2,
        amount_usd: "0.5",
        actual_usd: "0.75",
        status: "SETTLED",
        idempotency_key: "post-exec-2",
        resolved_ns: T0 + 20,
      });
      await sub.transaction(async (tx) => {
        await tx.budgets.insertReservation(pending);
        await tx.budgets.insertReservation(settled);
      });
      const got = await sub.transaction(async (tx) => [
        await tx.budgets.getReservation("r1"),
        await tx.budgets.getReservation("r2"),
      ]);
      expect(got).toEqual([pending, settled]);
      expect(got[0]?.account_ids).toEqual([WORLD.sessionAccount, WORLD.agentAccount, WORLD.orgAccount]);
      expect(got[0]?.actual_usd).toBeNull();
      expect(got[0]?.idempotency_key).toBeNull();
      expect(got[0]?.resolved_ns).toBeNull();
    });

    it("insertReservation of a fresh id, then an update of it in the same transaction: the update is what is stored", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const fresh = makeReservation("r-fresh");
      const settled = { ...fresh, status: "SETTLED" as const, actual_usd: "0.1", resolved_ns: T0 + 9 };
      await sub.transaction(async (tx) => {
        await tx.budgets.insertReservation(fresh);
        await tx.budgets.updateReservation(settled);
      });
      expect(await sub.transaction((tx) => tx.budgets.getReservation("r-fresh"))).toEqual(settled);
    });

    it('insertReservation of a taken id fails with "conflict"; the transaction, not caught, stores nothing of it', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const first = makeReservation("r-taken");
      await sub.transaction((tx) => tx.budgets.insertReservation(first));
      const account = (await sub.transaction((tx) => tx.budgets.getAccount(WORLD.agentAccount)))!;
      await expectSubstrateError(
        sub.transaction(async (tx) => {
          await tx.budgets.updateAccount({ ...account, reserved_usd: "7", updated_ns: T0 + 50 });
          await tx.budgets.insertReservation(makeReservation("r-taken", { amount_usd: "9" }));
        }),
        "conflict",
      );
      expect(
        await sub.transaction(async (tx) => ({
          reservation: await tx.budgets.getReservation("r-taken"),
          account: await tx.budgets.getAccount(WORLD.agentAccount),
        })),
      ).toEqual({ reservation: first, account });
    });

    it("updateReservation records a settlement (actual above the estimate, key, resolved_ns)", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await sub.transaction((tx) => tx.budgets.insertReservation(makeReservation("r1")));
      const settled = makeReservation("r1", {
        actual_usd: "0.3000001",
        status: "SETTLED",
        idempotency_key: "settle-r1",
        resolved_ns: T0 + 5,
      });
      await sub.transaction((tx) => tx.budgets.updateReservation(settled));
      expect(await sub.transaction((tx) => tx.budgets.getReservation("r1"))).toEqual(settled);
    });

    it("listReservations filters by session, by status, by both, and returns all with an empty filter", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await sub.transaction(async (tx) => {
        await tx.budgets.insertReservation(makeReservation("s1-pending", { session_id: WORLD.session1 }));
        await tx.budgets.insertReservation(
          makeReservation("s1-settled", { session_id: WORLD.session1, status: "SETTLED", actual_usd: "0.1" }),
        );
        await tx.budgets.insertReservation(makeReservation("s2-pending", { session_id: WORLD.session2 }));
        await tx.budgets.insertReservation(
          makeReservation("s2-released", { session_id: WORLD.session2, status: "RELEASED" }),
        );
      });
      const list = (filter: Parameters<BudgetStore["listReservations"]>[0]) =>
        sub.transaction((tx) => tx.budgets.listReservations(filter));
      expect(rids(await list({}))).toEqual(["s1-pending", "s1-settled", "s2-pending", "s2-released"]);
      expect(rids(await list({ sessionId: WORLD.session1 }))).toEqual(["s1-pending", "s1-settled"]);
      expect(rids(await list({ status: "PENDING" }))).toEqual(["s1-pending", "s2-pending"]);
      expect(rids(await list({ sessionId: WORLD.session2, status: "RELEASED" }))).toEqual(["s2-released"]);
      expect(await list({ sessionId: WORLD.session2, status: "SETTLED" })).toEqual([]);
      expect(await list({ status: "EXPIRED" })).toEqual([]);
      expect(await list({ sessionId: "no-such-session" })).toEqual([]);
      const [full] = await list({ sessionId: WORLD.session1, status: "SETTLED" });
      expect(full).toEqual(makeReservation("s1-settled", { status: "SETTLED", actual_usd: "0.1" }));
    });

    it("listExpired returns only PENDING reservations with expires_ns <= now, oldest first", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const now = T0 + 1_000;
      // Inserted out of order; creation order agrees with expiry order, so "oldest" is unambiguous.
      await sub.transaction(async (tx) => {
        await tx.budgets.insertReservation(
          makeReservation("mid", { created_ns: T0 + 2, expires_ns: now - 50 }),
        );
        await tx.budgets.insertReservation(
          makeReservation("at-now", { created_ns: T0 + 3, expires_ns: now }),
        );
        await tx.budgets.insertReservation(
          makeReservation("future", { created_ns: T0 + 4, expires_ns: now + 1 }),
        );
        await tx.budgets.insertReservation(
          makeReservation("oldest", { created_ns: T0 + 1, expires_ns: now - 100 }),
        );
        await tx.budgets.insertReservation(
          makeReservation("settled", {
            created_ns: T0,
            expires_ns: now - 500,
            status: "SETTLED",
            actual_usd: "0",
          }),
        );
        await tx.budgets.insertReservation(
          makeReservation("released", { created_ns: T0, expires_ns: now - 400, status: "RELEASED" }),
        );
        await tx.budgets.insertReservation(
          makeReservation("expired", { created_ns: T0, expires_ns: now - 300, status: "EXPIRED" }),
        );
      });
      const expired = await sub.transaction((tx) => tx.budgets.listExpired(now, 100));
      expect(expired.map((r) => r.reservation_id)).toEqual(["oldest", "mid", "at-now"]);
      expect(expired[0]).toEqual(makeReservation("oldest", { created_ns: T0 + 1, expires_ns: now - 100 }));
      expect(await sub.transaction((tx) => tx.budgets.listExpired(now - 101, 100))).toEqual([]);
      const later = await sub.transaction((tx) => tx.budgets.listExpired(now + 1, 100));
      expect(later.map((r) => r.reservation_id)).toEqual(["oldest", "mid", "at-now", "future"]);
    });

    it("listExpired honours limit and keeps the oldest", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await sub.transaction(async (tx) => {
        for (const i of [4, 1, 3, 0, 2]) {
          await tx.budgets.insertReservation(
            makeReservation(`r${i}`, { created_ns: T0 + i, expires_ns: T0 + 10 + i }),
          );
        }
      });
      const two = await sub.transaction((tx) => tx.budgets.listExpired(T0 + 100, 2));
      expect(two.map((r) => r.reservation_id)).toEqual(["r0", "r1"]);
      const one = await sub.transaction((tx) => tx.budgets.listExpired(T0 + 100, 1));
      expect(one.map((r) => r.reservation_id)).toEqual(["r0"]);
      const all = await sub.transaction((tx) => tx.budgets.listExpired(T0 + 100, 5));
      expect(all.map((r) => r.reservation_id)).toEqual(["r0", "r1", "r2", "r3", "r4"]);
    });
  });
}
