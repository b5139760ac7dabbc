// The escrow section of the contract suite: AllotmentStore rows, and budget-guard's grants, charges,
// returns, releases and reclaims on every substrate, including two handles racing for the last dollars.
import {
  chargeAllotment,
  checkEscrow,
  ensureAccount,
  escrowOf,
  type GrantPolicy,
  grantAllotment,
  reclaimAllotment,
  releaseAllotment,
  returnAllotment,
  toMoney,
} from "@leash/budget-guard";
import type { BudgetAllotment, Substrate, SubstrateTx } from "@leash/core";
import { describe, expect, it } from "vitest";
import { T0 } from "./fixtures.js";
import { CONCURRENCY_TIMEOUT_MS, raceWindow, twoHandles, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

const slow = { timeout: CONCURRENCY_TIMEOUT_MS };
const ORG = "org:escrow";
const LEASE = T0 + 60_000_000_000;
const POLICY: GrantPolicy = {
  minChunk: toMoney("0.01").units,
  maxChunk: toMoney("1").units,
  k: 2,
};

function row(shard: string, overrides: Partial<BudgetAllotment> = {}): BudgetAllotment {
  return {
    account_id: ORG,
    shard,
    holder: "daemon-a",
    epoch: 1,
    granted_usd: "0.5",
    spent_usd: "0.1",
    reserved_usd: "0.000000000000000001",
    lease_expires_ns: LEASE,
    created_ns: T0,
    updated_ns: T0,
    at_seq: null,
    ...overrides,
  };
}

function org(tx: SubstrateTx, limit: string) {
  return ensureAccount(tx, {
    account_id: ORG,
    scope: "organization",
    parent_id: null,
    limit_usd: limit,
    nowNs: T0,
  });
}

const grant = (
  tx: SubstrateTx,
  shard: string,
  request: string,
  extra: { epoch?: number; need?: string } = {},
) =>
  grantAllotment(tx, {
    account_id: ORG,
    shard,
    holder: `daemon-${shard}`,
    epoch: extra.epoch ?? 1,
    request_usd: request,
    ...(extra.need === undefined ? {} : { need_usd: extra.need }),
    active_shards: 2,
    lease_expires_ns: LEASE,
    nowNs: T0,
    policy: POLICY,
  });

async function invariants(sub: Substrate): Promise<unknown[]> {
  return sub.transaction(async (tx) => {
    const account = (await tx.budgets.getAccount(ORG))!;
    return checkEscrow(escrowOf(account, await tx.allotments!.list(ORG)));
  });
}

export function escrowContract(opts: SubstrateContractOptions): void {
  describe("budget escrow (allotments)", () => {
    it("stores allotment rows: put, get, list by shard, overwrite, delete, rollback", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await expect(sub.transaction(async (tx) => tx.allotments !== undefined)).resolves.toBe(true);
      await sub.transaction(async (tx) => {
        await tx.allotments!.put(row("b"));
        await tx.allotments!.put(row("a", { at_seq: 7, epoch: 3 }));
        await tx.allotments!.put({ ...row("x"), account_id: "org:other" });
      });
      const read = await sub.transaction(async (tx) => ({
        one: await tx.allotments!.get(ORG, "a"),
        none: await tx.allotments!.get(ORG, "zz"),
        list: (await tx.allotments!.list(ORG)).map((r) => r.shard),
        all: (await tx.allotments!.listAll()).map((r) => `${r.account_id}/${r.shard}`),
      }));
      expect(read.one).toEqual(row("a", { at_seq: 7, epoch: 3 }));
      expect(read.none).toBeNull();
      expect(read.list).toEqual(["a", "b"]);
      expect(read.all).toEqual([`${ORG}/a`, `${ORG}/b`, "org:other/x"]);
      await sub.transaction(async (tx) => {
        await tx.allotments!.put(row("a", { granted_usd: "0.75", updated_ns: T0 + 1 }));
        await tx.allotments!.delete(ORG, "b");
        await tx.allotments!.delete(ORG, "never");
      });
      await expect(
        sub.transaction(async (tx) => {
          await tx.allotments!.delete(ORG, "a");
          throw new Error("roll back");
        }),
      ).rejects.toThrow("roll back");
      const after = await sub.transaction(async (tx) => tx.allotments!.list(ORG));
      expect(after).toEqual([row("a", { granted_usd: "0.75", updated_ns: T0 + 1 })]);
    });

    it("grants within the limit, charges within the allotment, returns, releases and reclaims", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await sub.transaction((tx) => org(tx, "2"));
      const first = await sub.transaction((tx) => grant(tx, "a", "5"));
      expect(first.ok && first.amount.toFixed()).toBe("0.5"); // 2 / (k=2 · 2 shards)
      const charge = (spent: string, reserved: string, epoch = 1) =>
        sub.transaction((tx) =>
          chargeAllotment(tx, {
            account_id: ORG,
            shard: "a",
            holder: "daemon-a",
            epoch,
            spent_usd: spent,
            reserved_usd: reserved,
            at_seq: 3,
            nowNs: T0,
          }),
        );
      expect((await charge("0.2", "0.3")).ok).toBe(true);
      expect(await charge("0.2", "0.31")).toEqual({ ok: false, refusal: "over_allotment" });
      expect(await charge("0.2", "0.1", 2)).toEqual({ ok: false, refusal: "stale_epoch" });
      const back = await sub.transaction((tx) =>
        returnAllotment(tx, {
          account_id: ORG,
          shard: "a",
          holder: "daemon-a",
          epoch: 1,
          keep_usd: "0",
          nowNs: T0,
        }),
      );
      expect(back.ok && back.amount.toFixed()).toBe("0");
      expect((await charge("0.4", "0")).ok).toBe(true);
      const back2 = await sub.transaction((tx) =>
        returnAllotment(tx, { account_id: ORG, shard: "a", holder: "daemon-a", epoch: 1, nowNs: T0 }),
      );
      expect(back2.ok && back2.amount.toFixed()).toBe("0.1");
      await sub.transaction((tx) => grant(tx, "b", "0.2"));
      expect(await invariants(sub)).toEqual([]);
      // A newer epoch must reclaim first; the reclaim charges what the chain recorded (more than the row).
      expect(await sub.transaction((tx) => grant(tx, "a", "1", { epoch: 2 }))).toEqual({
        ok: false,
        refusal: "reclaim_first",
      });
      const early = await sub.transaction((tx) =>
        reclaimAllotment(tx, { account_id: ORG, shard: "a", chain_recorded_usd: "0.4", nowNs: T0 }),
      );
      expect(early).toEqual({ ok: false, refusal: "lease_live" });
      const reclaimed = await sub.transaction((tx) =>
        reclaimAllotment(tx, { account_id: ORG, shard: "a", chain_recorded_usd: "0.4", nowNs: LEASE }),
      );
      expect(reclaimed.ok).toBe(true);
      const released = await sub.transaction((tx) =>
        releaseAllotment(tx, { account_id: ORG, shard: "b", holder: "daemon-b", epoch: 1, nowNs: T0 }),
      );
      expect(released.ok && released.amount.toFixed()).toBe("0.2");
      const account = await sub.transaction(async (tx) => ({
        row: await tx.budgets.getAccount(ORG),
        rows: await tx.allotments!.list(ORG),
      }));
      expect(account.row?.spent_usd).toBe("0.4");
      expect(account.rows).toEqual([]);
    });

    it(
      "two handles racing for the last dollars never allot more than the limit, and all of it gets allotted",
      slow,
      async () => {
        const handles = await twoHandles(await useHarness(opts));
        await handles[0].transaction((tx) => org(tx, "3"));
        // 16 shards, each asking for $0.50 at a time (any amount will do) until nothing is left.
        const shards = Array.from({ length: 16 }, (_, i) => `s${i}`);
        const outcomes = await Promise.all(
          shards.map(async (shard, i) => {
            let got = 0n;
            for (let attempt = 0; attempt < 400; attempt++) {
              const sub = handles[(i + attempt) % 2]!;
              const r = await sub.transaction(async (tx) => {
                const result = await grant(tx, shard, "0.5");
                await raceWindow(sub);
                return result;
              });
              if (!r.ok) {
                expect(r.refusal).toBe("exhausted");
                break;
              }
              got += r.amount.units;
              // Spend it all within the allotment, so the next ask needs a top-up.
              await sub.transaction(async (tx) => {
                const own = (await tx.allotments!.get(ORG, shard))!;
                return chargeAllotment(tx, {
                  account_id: ORG,
                  shard,
                  holder: own.holder,
                  epoch: 1,
                  spent_usd: own.granted_usd,
                  reserved_usd: "0",
                  at_seq: null,
                  nowNs: T0,
                });
              });
            }
            return got;
          }),
        );
        const total = outcomes.reduce((a, b) => a + b, 0n);
        expect(total).toBe(toMoney("3").units);
        expect(await invariants(handles[1])).toEqual([]);
      },
    );
  });
}
