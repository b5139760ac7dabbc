// escrow.ts one rule at a time: grant sizes shrinking near exhaustion, epoch fencing, returns, reclaims.
// The simulation of many shards over a faulty network is escrow.sim.test.ts.
import { describe, expect, it } from "vitest";
import {
  checkEscrow,
  type EscrowAccount,
  type GrantPolicy,
  grantSize,
  planCharge,
  planGrant,
  planReclaim,
  planRelease,
  planReturn,
  unallotted,
} from "./escrow.js";

const POLICY: GrantPolicy = { minChunk: 10n, maxChunk: 1_000n, k: 2 };
const empty = (limit: bigint): EscrowAccount => ({ limit, spent: 0n, reserved: 0n, allotments: [] });
const ask = (shard: string, epoch: number, request: bigint, need?: bigint) => ({
  shard,
  holder: "d1",
  epoch,
  request,
  activeShards: 4,
  leaseExpiresNs: 100,
  ...(need === undefined ? {} : { need }),
});

function granted(account: EscrowAccount, shard: string, epoch: number, request: bigint): EscrowAccount {
  const r = planGrant(account, ask(shard, epoch, request), POLICY);
  if (!r.ok) throw new Error(r.refusal);
  return r.account;
}

describe("grantSize", () => {
  it("is a share of the free remaining, shrinking towards minChunk and then to what is left", () => {
    expect(grantSize(8_000n, 5_000n, 4, POLICY)).toBe(1_000n); // capped by maxChunk
    expect(grantSize(800n, 5_000n, 4, POLICY)).toBe(100n); // 800 / (2·4)
    expect(grantSize(40n, 5_000n, 4, POLICY)).toBe(10n); // the floor
    expect(grantSize(7n, 5_000n, 4, POLICY)).toBe(7n); // the last crumbs
    expect(grantSize(800n, 30n, 4, POLICY)).toBe(30n); // never more than asked
    expect(grantSize(0n, 30n, 4, POLICY)).toBe(0n);
  });
});

describe("planGrant", () => {
  it("never allots beyond the limit, and tops up the same allotment", () => {
    let account = granted(empty(1_000n), "a", 1, 10_000n);
    account = granted(account, "a", 1, 10_000n);
    account = granted(account, "b", 1, 10_000n);
    expect(checkEscrow(account)).toEqual([]);
    expect(account.allotments.find((a) => a.shard === "a")!.granted).toBe(125n + 109n);
  });

  it("fences: an older epoch is refused, a newer one must reclaim the old allotment first", () => {
    const account = granted(empty(1_000n), "a", 2, 100n);
    expect(planGrant(account, ask("a", 1, 100n), POLICY)).toEqual({ ok: false, refusal: "stale_epoch" });
    expect(planGrant(account, ask("a", 3, 100n), POLICY)).toEqual({ ok: false, refusal: "reclaim_first" });
  });

  it("grants what a call needs whole or not at all", () => {
    const account: EscrowAccount = {
      ...empty(100n),
      allotments: [
        { shard: "a", holder: "d", epoch: 1, granted: 95n, spent: 0n, reserved: 0n, leaseExpiresNs: 0 },
      ],
    };
    expect(unallotted(account)).toBe(5n);
    expect(planGrant(account, ask("b", 1, 50n, 6n), POLICY)).toEqual({ ok: false, refusal: "exhausted" });
    const r = planGrant(account, ask("b", 1, 50n, 5n), POLICY);
    expect(r.ok && r.amount).toBe(5n);
  });
});

describe("charges, returns, releases and reclaims", () => {
  it("refuses a charge past the allotment or under another epoch", () => {
    const account = granted(empty(1_000n), "a", 1, 50n);
    expect(planCharge(account, "a", 1, 30n, 20n).ok).toBe(true);
    expect(planCharge(account, "a", 1, 30n, 21n)).toEqual({ ok: false, refusal: "over_allotment" });
    expect(planCharge(account, "a", 2, 0n, 1n)).toEqual({ ok: false, refusal: "stale_epoch" });
  });

  it("returns only the unused part beyond what it keeps", () => {
    let account = granted(empty(1_000n), "a", 1, 50n);
    const charged = planCharge(account, "a", 1, 10n, 15n);
    if (!charged.ok) throw new Error(charged.refusal);
    account = charged.account;
    const back = planReturn(account, "a", 1, 5n);
    expect(back.ok && back.amount).toBe(20n);
    expect(back.ok && back.account.allotments[0]!.granted).toBe(30n);
  });

  it("a release charges spending and open holds; a reclaim waits for the lease unless superseded", () => {
    let account = granted(empty(1_000n), "a", 1, 50n);
    const charged = planCharge(account, "a", 1, 10n, 15n);
    if (!charged.ok) throw new Error(charged.refusal);
    account = charged.account;
    const released = planRelease(account, "a", 1);
    expect(released.ok && released.account.spent).toBe(25n);
    expect(released.ok && released.amount).toBe(25n);
    expect(planReclaim(account, "a", 25n, 99)).toEqual({ ok: false, refusal: "lease_live" });
    const late = planReclaim(account, "a", 40n, 100); // the chain recorded more than the row said
    expect(late.ok && late.account.spent).toBe(40n);
    const early = planReclaim(account, "a", 25n, 0, 2);
    expect(early.ok && early.account.allotments).toEqual([]);
  });

  it("checkEscrow names each broken invariant", () => {
    const account: EscrowAccount = {
      limit: 10n,
      spent: 5n,
      reserved: 0n,
      allotments: [
        { shard: "a", holder: "d", epoch: 1, granted: 6n, spent: 7n, reserved: 0n, leaseExpiresNs: 0 },
      ],
    };
    expect(checkEscrow(account).map((v) => v.kind)).toEqual(["over_allotment", "over_limit"]);
  });
});
