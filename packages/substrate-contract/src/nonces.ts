// Contract tests for the NonceStore: add-once semantics, number vs string identity, per-session scope.
// Concurrent adds of one nonce across handles are covered in concurrency.ts.

import type { Nonce } from "@leash/core";
import { describe, expect, it } from "vitest";
import { seedWorld, T0, WORLD } from "./fixtures.js";
import { useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

const { session1: S1, session2: S2 } = WORLD;

export function nonceStoreContract(opts: SubstrateContractOptions): void {
  describe("nonces", () => {
    it("add returns true the first time and false (changing nothing) the second time", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      expect(await sub.transaction((tx) => tx.nonces.add(S1, "n1", T0))).toBe(true);
      expect(await sub.transaction((tx) => tx.nonces.add(S1, "n1", T0 + 1))).toBe(false);
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(1);
      // Within one transaction too: the second add sees the first.
      const inOne = await sub.transaction(async (tx) => [
        await tx.nonces.add(S1, "n2", T0),
        await tx.nonces.add(S1, "n2", T0),
      ]);
      expect(inOne).toEqual([true, false]);
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(2);
    });

    it("has answering false, then add in the same transaction: true, and a second add false", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      await sub.transaction((tx) => tx.nonces.add(S1, "n0", T0));
      const answers = await sub.transaction(async (tx) => [
        await tx.nonces.has(S1, "n1"),
        await tx.nonces.add(S1, "n1", T0),
        await tx.nonces.has(S1, "n1"),
        await tx.nonces.add(S1, "n1", T0 + 1),
        await tx.nonces.has(S1, "n0"),
        await tx.nonces.add(S1, "n0", T0 + 1),
      ]);
      expect(answers).toEqual([false, true, true, false, true, false]);
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(2);
    });

    it("has and count reflect exactly the nonces added", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(0);
      expect(await sub.transaction((tx) => tx.nonces.has(S1, "a"))).toBe(false);
      await sub.transaction(async (tx) => {
        for (const n of ["a", "b", 3]) await tx.nonces.add(S1, n, T0);
      });
      const seen = await sub.transaction(async (tx) => ({
        a: await tx.nonces.has(S1, "a"),
        b: await tx.nonces.has(S1, "b"),
        three: await tx.nonces.has(S1, 3),
        c: await tx.nonces.has(S1, "c"),
        count: await tx.nonces.count(S1),
      }));
      expect(seen).toEqual({ a: true, b: true, three: true, c: false, count: 3 });
    });

    it('the number 7 and the string "7" are different nonces (also 0/"0", 1.5/"1.5", -1/"-1")', async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const pairs: Array<[number, string]> = [
        [7, "7"],
        [0, "0"],
        [1.5, "1.5"],
        [-1, "-1"],
      ];
      for (const [num, str] of pairs) {
        expect(await sub.transaction((tx) => tx.nonces.add(S1, num, T0))).toBe(true);
        expect(await sub.transaction((tx) => tx.nonces.has(S1, str))).toBe(false);
        expect(await sub.transaction((tx) => tx.nonces.add(S1, str, T0))).toBe(true);
        expect(await sub.transaction((tx) => tx.nonces.add(S1, num, T0))).toBe(false);
        expect(await sub.transaction((tx) => tx.nonces.add(S1, str, T0))).toBe(false);
      }
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(pairs.length * 2);
    });

    it("nonces are scoped to their session", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      expect(await sub.transaction((tx) => tx.nonces.add(S1, "shared", T0))).toBe(true);
      expect(await sub.transaction((tx) => tx.nonces.has(S2, "shared"))).toBe(false);
      expect(await sub.transaction((tx) => tx.nonces.add(S2, "shared", T0))).toBe(true);
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(1);
      expect(await sub.transaction((tx) => tx.nonces.count(S2))).toBe(1);
    });

    it("large integers, long and unusual strings are kept exactly as nonces", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await seedWorld(sub);
      const nonces: Nonce[] = [
        Number.MAX_SAFE_INTEGER,
        Number.MAX_SAFE_INTEGER - 1,
        String(Number.MAX_SAFE_INTEGER),
        "x".repeat(512),
        "ünï-😀-'\"-\\-%_",
        "",
      ];
      await sub.transaction(async (tx) => {
        for (const n of nonces) expect(await tx.nonces.add(S1, n, Number.MAX_SAFE_INTEGER)).toBe(true);
      });
      const again = await sub.transaction(async (tx) => {
        const results: boolean[] = [];
        for (const n of nonces) results.push(await tx.nonces.add(S1, n, T0));
        return results;
      });
      expect(again).toEqual(nonces.map(() => false));
      // Near-misses must not match: a LIKE pattern, a truncation, an off-by-one integer.
      const misses = await sub.transaction(async (tx) => [
        await tx.nonces.has(S1, "ünï-😀-'\"-\\-%"),
        await tx.nonces.has(S1, "x".repeat(511)),
        await tx.nonces.has(S1, Number.MAX_SAFE_INTEGER - 2),
      ]);
      expect(misses).toEqual([false, false, false]);
      expect(await sub.transaction((tx) => tx.nonces.count(S1))).toBe(nonces.length);
    });
  });
}
