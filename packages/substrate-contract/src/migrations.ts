// Contract tests for migrate() and the handle lifecycle: empty store, idempotence, concurrent migrators,
// data outliving close + reopen. Upgrading a given older schema is each substrate's own test to write.

import { SUBSTRATE_SPECIFICATION_VERSION } from "@leash/core";
import { describe, expect, it } from "vitest";
import { makeAccount, makeSession, seedWorld, WORLD } from "./fixtures.js";
import { useHarness } from "./harness.js";
import { spend } from "./nonces.js";
import type { SubstrateContractOptions } from "./options.js";

export function migrationContract(opts: SubstrateContractOptions): void {
  describe("identity", () => {
    it("declares the port's specificationVersion, a kind and boolean capabilities", async () => {
      const sub = await (await useHarness(opts)).open();
      expect(sub.specificationVersion).toBe(SUBSTRATE_SPECIFICATION_VERSION);
      expect(typeof sub.kind).toBe("string");
      expect(sub.kind.length).toBeGreaterThan(0);
      expect(typeof sub.capabilities.multiProcess).toBe("boolean");
      expect(typeof sub.capabilities.durable).toBe("boolean");
    });
  });

  describe("migrations", () => {
    it("migrate() on an empty store leaves it empty and usable", async () => {
      const sub = await (await useHarness(opts)).open();
      await sub.migrate();
      const empty = await sub.transaction(async (tx) => ({
        sessions: await tx.sessions.list(),
        reservations: await tx.budgets.listReservations({}),
        hitl: await tx.hitl.list({}),
        expired: await tx.budgets.listExpired(Number.MAX_SAFE_INTEGER, 10),
        head: await tx.chain.head(),
        entries: await tx.chain.count(),
        outbox: await tx.outbox.counts(),
      }));
      expect(empty).toEqual({
        sessions: [],
        reservations: [],
        hitl: [],
        expired: [],
        head: null,
        entries: 0,
        outbox: { PENDING: 0, DELIVERED: 0, DEAD: 0 },
      });
      await seedWorld(sub);
      expect(await sub.transaction((tx) => tx.sessions.get(WORLD.session1))).toEqual(
        makeSession(WORLD.session1),
      );
    });

    it("migrate() twice is idempotent and keeps the data written in between", async () => {
      const sub = await (await useHarness(opts)).open();
      await sub.migrate();
      await seedWorld(sub);
      await spend(sub, WORLD.session1, 7);
      await sub.migrate();
      await sub.migrate();
      const after = await sub.transaction(async (tx) => ({
        session: await tx.sessions.get(WORLD.session1),
        account: await tx.budgets.getAccount(WORLD.orgAccount),
        nonce: await tx.nonces.has(WORLD.session1, 7),
        sessions: (await tx.sessions.list()).length,
      }));
      expect(after).toEqual({
        session: makeSession(WORLD.session1),
        account: makeAccount(WORLD.orgAccount, { scope: "organization", limit_usd: "1000" }),
        nonce: true,
        sessions: 2,
      });
    });

    it("migrate() from two handles at once on an empty store succeeds on both", async () => {
      const harness = await useHarness(opts);
      const a = await harness.open();
      const b = await harness.open();
      const results = await Promise.allSettled([a.migrate(), b.migrate(), a.migrate()]);
      expect(results.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "fulfilled"]);
      await seedWorld(a);
      expect(await b.transaction((tx) => tx.sessions.get(WORLD.session2))).toEqual(
        makeSession(WORLD.session2, { agent_id: "agent-2", status: "PAUSED" }),
      );
    });

    it("committed data survives close, reopen and migrate", async () => {
      const harness = await useHarness(opts);
      const first = await harness.openMigrated();
      await seedWorld(first);
      await spend(first, WORLD.session1, "n-kept");
      await harness.close(first);
      const second = await harness.open();
      await second.migrate();
      const kept = await second.transaction(async (tx) => ({
        session: await tx.sessions.get(WORLD.session1),
        nonce: await tx.nonces.has(WORLD.session1, "n-kept"),
      }));
      // Every substrate keeps it: the durable ones on disk, memory for as long as its shared key lives.
      expect(kept).toEqual({ session: makeSession(WORLD.session1), nonce: true });
    });
  });
}
