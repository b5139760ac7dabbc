// Contract tests for transaction(): result passing, all-or-nothing rollback across every store, the error
// rethrown unchanged, read-your-writes, and commit visibility from another handle. Contention: concurrency.ts.

import type { Substrate, SubstrateTx } from "@leash/core";
import { describe, expect, it } from "vitest";
import {
  makeAccount,
  makeHitlRequest,
  makeReservation,
  makeSession,
  seedWorld,
  T0,
  WORLD,
} from "./fixtures.js";
import { byKey, expectSubstrateError, raceWindow, twoHandles, useHarness } from "./harness.js";
import { spendIn } from "./nonces.js";
import type { SubstrateContractOptions } from "./options.js";

/** Everything a test can observe about the world, read in one transaction. */
async function snapshot(sub: Substrate) {
  return sub.transaction(async (tx) => ({
    sessions: byKey(await tx.sessions.list(), (s) => s.session_id),
    accounts: [
      await tx.budgets.getAccount(WORLD.orgAccount),
      await tx.budgets.getAccount(WORLD.agentAccount),
      await tx.budgets.getAccount(WORLD.sessionAccount),
      await tx.budgets.getAccount("acct-new"),
    ],
    reservations: byKey(await tx.budgets.listReservations({}), (r) => r.reservation_id),
    hitl: byKey(await tx.hitl.list({}), (r) => r.request_id),
    nonces: [await tx.nonces.count(WORLD.session1), await tx.nonces.count(WORLD.session2)],
    seen: [await tx.nonces.has(WORLD.session1, "n-old"), await tx.nonces.has(WORLD.session1, "n-new")],
    chain: await tx.chain.range(0, 100),
  }));
}

/** A world with one existing row per store, so a rollback is checked against updates as well as inserts. */
async function seedWithRows(sub: Substrate): Promise<void> {
  await seedWorld(sub);
  await sub.transaction(async (tx) => {
    await tx.budgets.insertReservation(makeReservation("r-old"));
    await tx.hitl.insert(makeHitlRequest("h-old"));
    await spendIn(tx, WORLD.session1, "n-old");
  });
}

/** Writes to every store: an insert and an update each, and entries spending a nonce each. */
async function writeEverywhere(tx: SubstrateTx): Promise<void> {
  await tx.sessions.insert(makeSession("s-new"));
  await tx.sessions.update(makeSession(WORLD.session1, { call_count: 100, status: "TERMINATED" }));
  await tx.budgets.insertAccount(makeAccount("acct-new"));
  await tx.budgets.updateAccount(makeAccount(WORLD.sessionAccount, { spent_usd: "9.99" }));
  await tx.budgets.insertReservation(makeReservation("r-new"));
  await tx.budgets.updateReservation(makeReservation("r-old", { status: "SETTLED", actual_usd: "0.2" }));
  await tx.hitl.insert(makeHitlRequest("h-new"));
  await tx.hitl.update(makeHitlRequest("h-old", { status: "DECIDED", decision: "approve" }));
  await spendIn(tx, WORLD.session1, "n-new");
  await spendIn(tx, WORLD.session2, 42);
}

export function transactionContract(opts: SubstrateContractOptions): void {
  describe("transactions", () => {
    it("resolves with the value fn resolves with", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const value = { answer: 42, list: ["a"] };
      await expect(sub.transaction(async () => value)).resolves.toBe(value);
      await expect(sub.transaction(async () => undefined)).resolves.toBeUndefined();
    });

    it("a throw after writes in every store rolls all of them back and rethrows the same error", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWithRows(sub);
      const before = await snapshot(sub);
      const boom = new Error("boom");
      await expect(
        sub.transaction(async (tx) => {
          await writeEverywhere(tx);
          throw boom;
        }),
      ).rejects.toBe(boom);
      expect(await snapshot(sub)).toEqual(before);
      // The same writes then commit normally, so the rollback above was not a no-op by accident.
      await sub.transaction(writeEverywhere);
      const after = await snapshot(sub);
      expect(after).not.toEqual(before);
      expect(after.seen).toEqual([true, true]);
      expect(after.accounts[3]).toEqual(makeAccount("acct-new"));
    });

    it("a synchronous throw and a non-Error rejection are rethrown unchanged", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const sync = new TypeError("thrown synchronously");
      await expect(
        sub.transaction(() => {
          throw sync;
        }),
      ).rejects.toBe(sync);
      const odd = { not: "an Error" };
      await expect(
        sub.transaction(async (tx) => {
          await tx.sessions.insert(makeSession("s-odd"));
          throw odd;
        }),
      ).rejects.toBe(odd);
      expect(await sub.transaction((tx) => tx.sessions.get("s-odd"))).toBeNull();
    });

    it("a store error rolls back the transaction's earlier writes, and the handle stays usable", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await expectSubstrateError(
        sub.transaction(async (tx) => {
          await tx.sessions.insert(makeSession("s-first"));
          await spendIn(tx, WORLD.session1, "n-first");
          await tx.budgets.updateAccount(makeAccount(WORLD.orgAccount, { spent_usd: "1" }));
          await tx.sessions.insert(makeSession(WORLD.session1));
        }),
        "conflict",
      );
      const after = await sub.transaction(async (tx) => ({
        first: await tx.sessions.get("s-first"),
        nonce: await tx.nonces.has(WORLD.session1, "n-first"),
        entries: await tx.chain.count(),
        spent: (await tx.budgets.getAccount(WORLD.orgAccount))?.spent_usd,
      }));
      expect(after).toEqual({ first: null, nonce: false, entries: 0, spent: "0" });
      await sub.transaction((tx) => tx.sessions.insert(makeSession("s-first")));
      expect(await sub.transaction((tx) => tx.sessions.get("s-first"))).toEqual(makeSession("s-first"));
    });

    it("reads inside a transaction see that transaction's own writes, in every store", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWithRows(sub);
      const seen = await sub.transaction(async (tx) => {
        await writeEverywhere(tx);
        return {
          newSession: await tx.sessions.get("s-new"),
          updatedSession: (await tx.sessions.get(WORLD.session1))?.call_count,
          terminated: (await tx.sessions.list({ status: "TERMINATED" })).map((s) => s.session_id),
          sessionCount: (await tx.sessions.list()).length,
          newAccount: await tx.budgets.getAccount("acct-new"),
          updatedAccount: (await tx.budgets.getAccount(WORLD.sessionAccount))?.spent_usd,
          newReservation: await tx.budgets.getReservation("r-new"),
          updatedReservation: (await tx.budgets.getReservation("r-old"))?.status,
          pending: (await tx.budgets.listReservations({ status: "PENDING" })).map((r) => r.reservation_id),
          expired: (await tx.budgets.listExpired(T0 + 30_000_000_000, 10)).map((r) => r.reservation_id),
          newRequest: await tx.hitl.get("h-new"),
          updatedRequest: (await tx.hitl.get("h-old"))?.decision,
          decided: (await tx.hitl.list({ status: "DECIDED" })).map((r) => r.request_id),
          nonce: await tx.nonces.has(WORLD.session1, "n-new"),
          nonceNumber: await tx.nonces.has(WORLD.session2, 42),
          nonceCount: await tx.nonces.count(WORLD.session1),
        };
      });
      expect(seen).toEqual({
        newSession: makeSession("s-new"),
        updatedSession: 100,
        terminated: [WORLD.session1],
        sessionCount: 3,
        newAccount: makeAccount("acct-new"),
        updatedAccount: "9.99",
        newReservation: makeReservation("r-new"),
        updatedReservation: "SETTLED",
        pending: ["r-new"],
        expired: ["r-new"],
        newRequest: makeHitlRequest("h-new"),
        updatedRequest: "approve",
        decided: ["h-old"],
        nonce: true,
        nonceNumber: true,
        nonceCount: 2,
      });
    });

    it("a committed transaction is visible to the next transaction on another handle", async () => {
      const [a, b] = await twoHandles(await useHarness(opts));
      await seedWithRows(a);
      await a.transaction(writeEverywhere);
      expect(await snapshot(b)).toEqual(await snapshot(a));
      const fromB = await b.transaction(async (tx) => ({
        session: await tx.sessions.get("s-new"),
        nonce: await tx.nonces.has(WORLD.session1, "n-new"),
      }));
      expect(fromB).toEqual({ session: makeSession("s-new"), nonce: true });
      await expectSubstrateError(
        b.transaction((tx) => spendIn(tx, WORLD.session1, "n-new")),
        "conflict",
      );
    });

    it("another handle sees all of a concurrent transaction's writes or none of them", async () => {
      const [a, b] = await twoHandles(await useHarness(opts));
      await seedWorld(a);
      const writer = a.transaction(async (tx) => {
        await tx.sessions.insert(makeSession("s-x"));
        await raceWindow(a);
        await tx.budgets.updateAccount(makeAccount(WORLD.orgAccount, { spent_usd: "5" }));
        await raceWindow(a);
        await tx.hitl.insert(makeHitlRequest("h-x"));
      });
      const readers: Promise<boolean[]>[] = [];
      for (let i = 0; i < 5; i++) {
        await raceWindow(b);
        readers.push(
          b.transaction(async (tx) => [
            (await tx.sessions.get("s-x")) !== null,
            (await tx.budgets.getAccount(WORLD.orgAccount))?.spent_usd === "5",
            (await tx.hitl.get("h-x")) !== null,
          ]),
        );
      }
      await writer;
      for (const seen of await Promise.all(readers)) {
        expect([
          [true, true, true],
          [false, false, false],
        ]).toContainEqual(seen);
      }
      // After the writer resolved, everything is visible.
      expect(await b.transaction(async (tx) => (await tx.hitl.get("h-x")) !== null)).toBe(true);
    });
  });
}
