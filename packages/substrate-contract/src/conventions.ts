// Contract tests for behaviour the port implies but does not spell out with MUST: codes for the remaining
// inserts and updates, and closed handles. Kept apart so the port's wording can catch up (or these can go).

import { describe, expect, it } from "vitest";
import { makeAccount, makeHitlRequest, makeReservation, makeSession, seedWorld, WORLD } from "./fixtures.js";
import { expectSubstrateError, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

export function conventionsContract(opts: SubstrateContractOptions): void {
  describe("conventions beyond the port's MUST wording", () => {
    it('insertReservation and hitl.insert of an existing id fail with "conflict" and keep the first', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await sub.transaction(async (tx) => {
        await tx.budgets.insertReservation(makeReservation("r1"));
        await tx.hitl.insert(makeHitlRequest("h1"));
      });
      await expectSubstrateError(
        sub.transaction((tx) => tx.budgets.insertReservation(makeReservation("r1", { amount_usd: "9" }))),
        "conflict",
      );
      await expectSubstrateError(
        sub.transaction((tx) => tx.hitl.insert(makeHitlRequest("h1", { tool_name: "other" }))),
        "conflict",
      );
      const kept = await sub.transaction(async (tx) => [
        await tx.budgets.getReservation("r1"),
        await tx.hitl.get("h1"),
      ]);
      expect(kept).toEqual([makeReservation("r1"), makeHitlRequest("h1")]);
    });

    it('updateAccount, updateReservation and hitl.update of an unknown id fail with "not_found", creating nothing', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await expectSubstrateError(
        sub.transaction((tx) => tx.budgets.updateAccount(makeAccount("ghost"))),
        "not_found",
      );
      await expectSubstrateError(
        sub.transaction((tx) => tx.budgets.updateReservation(makeReservation("ghost"))),
        "not_found",
      );
      await expectSubstrateError(
        sub.transaction((tx) => tx.hitl.update(makeHitlRequest("ghost"))),
        "not_found",
      );
      const created = await sub.transaction(async (tx) => [
        await tx.budgets.getAccount("ghost"),
        await tx.budgets.getReservation("ghost"),
        await tx.hitl.get("ghost"),
      ]);
      expect(created).toEqual([null, null, null]);
    });

    it('a closed handle rejects transactions with "closed"; another handle on the location still works', async () => {
      const harness = await useHarness(opts);
      const a = await harness.openMigrated();
      const b = await harness.openMigrated();
      await seedWorld(a);
      await harness.close(a);
      await expectSubstrateError(
        a.transaction((tx) => tx.sessions.get(WORLD.session1)),
        "closed",
      );
      await b.transaction((tx) => tx.sessions.insert(makeSession("s-after-close")));
      expect(await b.transaction((tx) => tx.sessions.get(WORLD.session1))).toEqual(
        makeSession(WORLD.session1),
      );
      expect(await b.transaction((tx) => tx.sessions.get("s-after-close"))).not.toBeNull();
    });
  });
}
