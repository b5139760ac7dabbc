// Two-phase reservations against a real substrate (the in-memory one), never a hand-written fake.
// The cross-substrate guarantees (SQLite, PostgreSQL, two handles racing) live in @leash/substrate-contract.
import type { BudgetAccount, Substrate, SubstrateTx } from "@leash/core";
import { createMemorySubstrate, deleteSharedMemory } from "@leash/substrate-memory";
import fc from "fast-check";
import { beforeEach, describe, expect, it } from "vitest";
import { accountChain, available, ensureAccount } from "./accounts.js";
import { AlreadyResolvedError, BudgetGuardError } from "./errors.js";
import { expire } from "./expiry.js";
import { Money, moneyString, toMoney } from "./money.js";
import { planHold, type ReserveInput, release, reserve, settle } from "./reservations.js";

const T0 = 1_000_000;
const TTL = 60_000_000_000;

let substrate: Substrate;
beforeEach(() => {
  substrate = createMemorySubstrate();
});

let nextId = 0;
function hold(
  account_id: string,
  amount_usd: number | string,
  extra: Partial<ReserveInput> = {},
): ReserveInput {
  nextId += 1;
  return {
    reservation_id: `r${nextId}`,
    account_id,
    session_id: "sess",
    call_number: nextId,
    amount_usd,
    nowNs: T0,
    ttlNs: TTL,
    ...extra,
  };
}

async function tree(
  tx: SubstrateTx,
  limits: { org: number | string; agent: number | string; sess: number | string },
) {
  await ensureAccount(tx, {
    account_id: "org",
    scope: "organization",
    parent_id: null,
    limit_usd: limits.org,
    nowNs: T0,
  });
  await ensureAccount(tx, {
    account_id: "agent",
    scope: "agent",
    parent_id: "org",
    limit_usd: limits.agent,
    nowNs: T0,
  });
  await ensureAccount(tx, {
    account_id: "sess",
    scope: "session",
    parent_id: "agent",
    limit_usd: limits.sess,
    nowNs: T0,
  });
}

async function single(id: string, limit: number | string): Promise<void> {
  await substrate.transaction((tx) =>
    ensureAccount(tx, { account_id: id, scope: "session", parent_id: null, limit_usd: limit, nowNs: T0 }),
  );
}

async function accounts(
  ...ids: string[]
): Promise<Record<string, Pick<BudgetAccount, "spent_usd" | "reserved_usd">>> {
  return substrate.transaction(async (tx) => {
    const out: Record<string, Pick<BudgetAccount, "spent_usd" | "reserved_usd">> = {};
    for (const id of ids) {
      const account = (await tx.budgets.getAccount(id))!;
      out[id] = { spent_usd: account.spent_usd, reserved_usd: account.reserved_usd };
    }
    return out;
  });
}

async function caught(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected a rejection");
}

describe("reserve", () => {
  it("charges the hold to every account of the chain and reports available before and after", async () => {
    const result = await substrate.transaction(async (tx) => {
      await tree(tx, { org: 10, agent: 5, sess: 2 });
      return reserve(tx, hold("sess", "0.75"));
    });
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(moneyString(result.availableBefore)).toBe("2");
    expect(moneyString(result.availableAfter)).toBe("1.25");
    expect(result.replayed).toBe(false);
    expect(result.reservation).toMatchObject({
      account_ids: ["sess", "agent", "org"],
      amount_usd: "0.75",
      status: "PENDING",
      actual_usd: null,
      expires_ns: T0 + TTL,
      resolved_ns: null,
    });
    expect(await accounts("sess", "agent", "org")).toEqual({
      sess: { spent_usd: "0", reserved_usd: "0.75" },
      agent: { spent_usd: "0", reserved_usd: "0.75" },
      org: { spent_usd: "0", reserved_usd: "0.75" },
    });
  });

  it("charges a chain read earlier in the same transaction without reading it again", async () => {
    const result = await substrate.transaction(async (tx) => {
      await tree(tx, { org: 10, agent: 5, sess: 2 });
      const chain = await accountChain(tx, "sess");
      let reads = 0;
      const counting: SubstrateTx = {
        ...tx,
        budgets: Object.assign(Object.create(tx.budgets), {
          getAccount: (id: string) => {
            reads += 1;
            return tx.budgets.getAccount(id);
          },
        }),
      };
      const held = await reserve(counting, hold("sess", "0.5", { accounts: chain }));
      return { held, reads };
    });
    expect(result.reads).toBe(0);
    expect(result.held.ok && moneyString(result.held.availableAfter)).toBe("1.5");
    expect(await accounts("sess", "agent", "org")).toEqual({
      sess: { spent_usd: "0", reserved_usd: "0.5" },
      agent: { spent_usd: "0", reserved_usd: "0.5" },
      org: { spent_usd: "0", reserved_usd: "0.5" },
    });
  });

  it("refuses a preloaded chain that starts at another account, and writes nothing", async () => {
    const error = await caught(
      substrate.transaction(async (tx) => {
        await tree(tx, { org: 10, agent: 5, sess: 2 });
        const agentChain = await accountChain(tx, "agent");
        return reserve(tx, hold("sess", "0.5", { accounts: agentChain }));
      }),
    );
    expect(BudgetGuardError.isInstance(error) && error.code).toBe("account_not_found");
    expect(await substrate.transaction((tx) => tx.budgets.getAccount("sess"))).toBeNull();
  });

  it("refuses with budget_overrun when the call needs more than is left, and writes nothing", async () => {
    await single("s", 1);
    const result = await substrate.transaction((tx) =>
      reserve(tx, hold("s", "1.01", { reservation_id: "big" })),
    );
    expect(result).toMatchObject({ ok: false, code: "budget_overrun" });
    if (!result.ok) expect(moneyString(result.available)).toBe("1");
    expect(await accounts("s")).toEqual({ s: { spent_usd: "0", reserved_usd: "0" } });
    await expect(substrate.transaction((tx) => tx.budgets.getReservation("big"))).resolves.toBeNull();
  });

  it("refuses with budget_exhausted when nothing is left, even for a zero-cost call", async () => {
    await single("s", "0.5");
    await substrate.transaction((tx) => reserve(tx, hold("s", "0.5")));
    const result = await substrate.transaction((tx) => reserve(tx, hold("s", 0)));
    expect(result).toMatchObject({ ok: false, code: "budget_exhausted" });
    if (!result.ok) expect(moneyString(result.available)).toBe("0");
  });

  it("is bounded by the parent: a child cannot hold more than its parent has left", async () => {
    await substrate.transaction(async (tx) => {
      await ensureAccount(tx, {
        account_id: "org",
        scope: "organization",
        parent_id: null,
        limit_usd: 1,
        nowNs: T0,
      });
      await ensureAccount(tx, {
        account_id: "g1",
        scope: "guard",
        parent_id: "org",
        limit_usd: 1,
        nowNs: T0,
      });
      await ensureAccount(tx, {
        account_id: "g2",
        scope: "guard",
        parent_id: "org",
        limit_usd: 1,
        nowNs: T0,
      });
    });
    // Both children were carved when the parent had 1 left; together they still cannot pass 1.
    const first = await substrate.transaction((tx) => reserve(tx, hold("g1", "0.6")));
    const second = await substrate.transaction((tx) => reserve(tx, hold("g2", "0.6")));
    expect(first.ok).toBe(true);
    expect(second).toMatchObject({ ok: false, code: "budget_overrun" });
    if (!second.ok) expect(moneyString(second.available)).toBe("0.4");
  });

  it("is idempotent by reservation id: the same request again is a replay, another request a conflict", async () => {
    await single("s", 1);
    const input = hold("s", "0.3", { idempotency_key: "pre-exec-7" });
    const first = await substrate.transaction((tx) => reserve(tx, input));
    const again = await substrate.transaction((tx) => reserve(tx, input));
    expect(again).toMatchObject({ ok: true, replayed: true });
    if (first.ok && again.ok) {
      expect(again.reservation).toEqual(first.reservation);
      expect(moneyString(again.availableBefore)).toBe("0.7");
      expect(moneyString(again.availableAfter)).toBe("0.7");
    }
    expect(await accounts("s")).toEqual({ s: { spent_usd: "0", reserved_usd: "0.3" } });
    const conflict = await caught(
      substrate.transaction((tx) => reserve(tx, { ...input, amount_usd: "0.4" })),
    );
    expect(BudgetGuardError.isInstance(conflict) && conflict.code).toBe("reservation_conflict");
  });

  it("commits or rolls back with the caller's transaction", async () => {
    await single("s", 1);
    await expect(
      substrate.transaction(async (tx) => {
        await reserve(tx, hold("s", "0.5", { reservation_id: "doomed" }));
        throw new Error("the decision failed to append to the chain");
      }),
    ).rejects.toThrow("the decision failed");
    expect(await accounts("s")).toEqual({ s: { spent_usd: "0", reserved_usd: "0" } });
    await expect(substrate.transaction((tx) => tx.budgets.getReservation("doomed"))).resolves.toBeNull();
  });

  it("rejects bad input with typed errors", async () => {
    await single("s", 1);
    const cases: [Partial<ReserveInput>, string][] = [
      [{ amount_usd: Number.NaN }, "invalid_amount"],
      [{ amount_usd: "-0.1" }, "invalid_amount"],
      [{ ttlNs: 0 }, "invalid_argument"],
      [{ call_number: 1.5 }, "invalid_argument"],
      [{ account_id: "ghost" }, "account_not_found"],
      [{ idempotency_key: "" }, "invalid_argument"],
    ];
    for (const [change, code] of cases) {
      const error = await caught(substrate.transaction((tx) => reserve(tx, hold("s", "0.1", change))));
      expect(BudgetGuardError.isInstance(error) && error.code).toBe(code);
    }
  });
});

describe("settle", () => {
  it("moves the estimate out of reserved and adds the actual to spent on every account", async () => {
    const reserved = await substrate.transaction(async (tx) => {
      await tree(tx, { org: 10, agent: 5, sess: 2 });
      return reserve(tx, hold("sess", "0.5", { reservation_id: "r" }));
    });
    expect(reserved.ok).toBe(true);
    const result = await substrate.transaction((tx) =>
      settle(tx, "r", { actual_usd: 0.3, nowNs: T0 + 10, idempotency_key: "post-1" }),
    );
    expect(moneyString(result.actual_usd)).toBe("0.3");
    expect(moneyString(result.amount_usd)).toBe("0.5");
    expect(moneyString(result.released_usd)).toBe("0.2");
    expect(moneyString(result.overrun_usd)).toBe("0");
    expect(result.replayed).toBe(false);
    expect(result.reservation).toMatchObject({
      status: "SETTLED",
      actual_usd: "0.3",
      idempotency_key: "post-1",
      resolved_ns: T0 + 10,
    });
    expect(await accounts("sess", "agent", "org")).toEqual({
      sess: { spent_usd: "0.3", reserved_usd: "0" },
      agent: { spent_usd: "0.3", reserved_usd: "0" },
      org: { spent_usd: "0.3", reserved_usd: "0" },
    });
  });

  it("records an actual above the estimate truthfully, reports the overrun, and available reads 0", async () => {
    await single("s", 1);
    await substrate.transaction((tx) => reserve(tx, hold("s", "0.9", { reservation_id: "r" })));
    const result = await substrate.transaction((tx) =>
      settle(tx, "r", { actual_usd: "1.25", nowNs: T0, idempotency_key: "k" }),
    );
    expect(moneyString(result.overrun_usd)).toBe("0.35");
    expect(moneyString(result.released_usd)).toBe("0");
    expect(await accounts("s")).toEqual({ s: { spent_usd: "1.25", reserved_usd: "0" } });
    const left = await substrate.transaction((tx) => available(tx, "s"));
    expect(moneyString(left)).toBe("0");
    expect(left.isNegative()).toBe(false);
    const next = await substrate.transaction((tx) => reserve(tx, hold("s", "0.01")));
    expect(next).toMatchObject({ ok: false, code: "budget_exhausted" });
  });

  it("returns the first result when repeated with the same key, without counting twice", async () => {
    await single("s", 1);
    await substrate.transaction((tx) => reserve(tx, hold("s", "0.4", { reservation_id: "r" })));
    const first = await substrate.transaction((tx) =>
      settle(tx, "r", { actual_usd: "0.4", nowNs: T0, idempotency_key: "k" }),
    );
    const again = await substrate.transaction((tx) =>
      settle(tx, "r", { actual_usd: "0.4", nowNs: T0 + 99, idempotency_key: "k" }),
    );
    expect(again.replayed).toBe(true);
    expect({ ...again, replayed: false }).toEqual(first);
    expect(await accounts("s")).toEqual({ s: { spent_usd: "0.4", reserved_usd: "0" } });
  });

  it("fails with settlement_conflict when repeated with the same key but another actual; the first stands", async () => {
    await single("s", 1);
    await substrate.transaction((tx) => reserve(tx, hold("s", "0.4", { reservation_id: "r" })));
    await substrate.transaction((tx) =>
      settle(tx, "r", { actual_usd: "0.3", nowNs: T0, idempotency_key: "k" }),
    );
    for (const other of ["0.31", 0.29, "0.300000000000000001"]) {
      const error = await caught(
        substrate.transaction((tx) =>
          settle(tx, "r", { actual_usd: other, nowNs: T0 + 1, idempotency_key: "k" }),
        ),
      );
      expect(BudgetGuardError.isInstance(error) && error.code).toBe("settlement_conflict");
    }
    const again = await substrate.transaction((tx) =>
      settle(tx, "r", { actual_usd: "0.30", nowNs: T0 + 2, idempotency_key: "k" }),
    );
    expect([again.replayed, moneyString(again.actual_usd)]).toEqual([true, "0.3"]);
    expect(await accounts("s")).toEqual({ s: { spent_usd: "0.3", reserved_usd: "0" } });
  });

  it("still spends the actual of a hold that expired (late), once, never giving the hold back twice", async () => {
    await single("s", 1);
    await substrate.transaction(async (tx) => {
      await reserve(tx, hold("s", "0.2", { reservation_id: "late", ttlNs: 5 }));
      await reserve(tx, hold("s", "0.5", { reservation_id: "other" }));
    });
    await substrate.transaction((tx) => expire(tx, T0 + 5, 10));
    expect(await accounts("s")).toEqual({ s: { spent_usd: "0", reserved_usd: "0.5" } });
    const late = await substrate.transaction((tx) =>
      settle(tx, "late", { actual_usd: "0.7", nowNs: T0 + 9, idempotency_key: "k" }),
    );
    expect([late.late, late.replayed, moneyString(late.overrun_usd)]).toEqual([true, false, "0.5"]);
    expect(late.reservation).toMatchObject({ status: "SETTLED", actual_usd: "0.7", resolved_ns: T0 + 9 });
    // 0.7 spent although only 0.5 was left: an overrun, recorded truthfully; nothing reads negative.
    expect(await accounts("s")).toEqual({ s: { spent_usd: "0.7", reserved_usd: "0.5" } });
    expect(moneyString(await substrate.transaction((tx) => available(tx, "s")))).toBe("0");
    const again = await substrate.transaction((tx) =>
      settle(tx, "late", { actual_usd: "0.7", nowNs: T0 + 10, idempotency_key: "k" }),
    );
    expect({ ...again, replayed: false }).toEqual(late);
    expect(await accounts("s")).toEqual({ s: { spent_usd: "0.7", reserved_usd: "0.5" } });
    const onTime = await substrate.transaction((tx) =>
      settle(tx, "other", { actual_usd: "0.1", nowNs: T0 + 10, idempotency_key: "k" }),
    );
    expect(onTime.late).toBe(false);
  });

  it("fails with already_resolved for another key, or after a release", async () => {
    await single("s", 1);
    await substrate.transaction(async (tx) => {
      await reserve(tx, hold("s", "0.1", { reservation_id: "settled" }));
      await reserve(tx, hold("s", "0.1", { reservation_id: "released" }));
      await settle(tx, "settled", { actual_usd: "0.1", nowNs: T0, idempotency_key: "k1" });
      await release(tx, "released", { nowNs: T0 });
    });
    for (const [id, status] of [
      ["settled", "SETTLED"],
      ["released", "RELEASED"],
    ] as const) {
      const error = await caught(
        substrate.transaction((tx) =>
          settle(tx, id, { actual_usd: "0.1", nowNs: T0, idempotency_key: "k2" }),
        ),
      );
      expect(AlreadyResolvedError.isInstance(error)).toBe(true);
      expect(error).toMatchObject({ code: "already_resolved", status, reservationId: id });
    }
    expect(await accounts("s")).toEqual({ s: { spent_usd: "0.1", reserved_usd: "0" } });
  });

  it("fails with reservation_not_found for an unknown id", async () => {
    const error = await caught(
      substrate.transaction((tx) => settle(tx, "nope", { actual_usd: 1, nowNs: T0, idempotency_key: "k" })),
    );
    expect(BudgetGuardError.isInstance(error) && error.code).toBe("reservation_not_found");
  });
});

describe("release", () => {
  it("returns the whole hold and marks the reservation RELEASED; a repeat is a replay", async () => {
    await single("s", 1);
    await substrate.transaction((tx) => reserve(tx, hold("s", "0.6", { reservation_id: "r" })));
    const result = await substrate.transaction((tx) =>
      release(tx, "r", { nowNs: T0 + 1, idempotency_key: "rel" }),
    );
    expect(moneyString(result.released_usd)).toBe("0.6");
    expect(result.reservation).toMatchObject({
      status: "RELEASED",
      resolved_ns: T0 + 1,
      idempotency_key: "rel",
    });
    expect(await accounts("s")).toEqual({ s: { spent_usd: "0", reserved_usd: "0" } });
    const again = await substrate.transaction((tx) =>
      release(tx, "r", { nowNs: T0 + 2, idempotency_key: "rel" }),
    );
    expect(again.replayed).toBe(true);
    expect(again.reservation).toEqual(result.reservation);
    const other = await caught(
      substrate.transaction((tx) => release(tx, "r", { nowNs: T0 + 2, idempotency_key: "x" })),
    );
    expect(other).toMatchObject({ code: "already_resolved", status: "RELEASED" });
    expect(await accounts("s")).toEqual({ s: { spent_usd: "0", reserved_usd: "0" } });
  });

  it("cannot release what was settled", async () => {
    await single("s", 1);
    await substrate.transaction(async (tx) => {
      await reserve(tx, hold("s", "0.6", { reservation_id: "r" }));
      await settle(tx, "r", { actual_usd: "0.5", nowNs: T0, idempotency_key: "k" });
    });
    const error = await caught(
      substrate.transaction((tx) => release(tx, "r", { nowNs: T0, idempotency_key: "k" })),
    );
    expect(error).toMatchObject({ code: "already_resolved", status: "SETTLED" });
  });
});

describe("expire", () => {
  it("releases PENDING holds whose TTL has passed, oldest first, up to the limit", async () => {
    await single("s", 10);
    await substrate.transaction(async (tx) => {
      await reserve(tx, hold("s", 1, { reservation_id: "late", ttlNs: 300 }));
      await reserve(tx, hold("s", 2, { reservation_id: "early", ttlNs: 100 }));
      await reserve(tx, hold("s", 3, { reservation_id: "fresh", ttlNs: 10_000 }));
      await reserve(tx, hold("s", 4, { reservation_id: "done", ttlNs: 100 }));
      await settle(tx, "done", { actual_usd: 4, nowNs: T0, idempotency_key: "k" });
    });
    const firstBatch = await substrate.transaction((tx) => expire(tx, T0 + 1_000, 1));
    expect(firstBatch.map((r) => [r.reservation_id, r.status, r.resolved_ns])).toEqual([
      ["early", "EXPIRED", T0 + 1_000],
    ]);
    const secondBatch = await substrate.transaction((tx) => expire(tx, T0 + 1_000, 10));
    expect(secondBatch.map((r) => r.reservation_id)).toEqual(["late"]);
    expect(await substrate.transaction((tx) => expire(tx, T0 + 1_000, 10))).toEqual([]);
    // Only "fresh" is still held; "done" was spent.
    expect(await accounts("s")).toEqual({ s: { spent_usd: "4", reserved_usd: "3" } });
  });

  it("treats a TTL that ends exactly now as passed", async () => {
    await single("s", 1);
    await substrate.transaction((tx) => reserve(tx, hold("s", 1, { reservation_id: "r", ttlNs: 50 })));
    expect(await substrate.transaction((tx) => expire(tx, T0 + 49, 10))).toEqual([]);
    expect((await substrate.transaction((tx) => expire(tx, T0 + 50, 10))).length).toBe(1);
  });

  it("leaves a late settle possible until the expiry actually runs", async () => {
    await single("s", 1);
    await substrate.transaction((tx) => reserve(tx, hold("s", "0.5", { reservation_id: "r", ttlNs: 10 })));
    const result = await substrate.transaction((tx) =>
      settle(tx, "r", { actual_usd: "0.5", nowNs: T0 + 1_000, idempotency_key: "k" }),
    );
    expect(result.reservation.status).toBe("SETTLED");
    expect(await substrate.transaction((tx) => expire(tx, T0 + 2_000, 10))).toEqual([]);
  });
});

describe("exactness against the store", () => {
  it("1,000 × $0.001 exhaust $1 exactly at call 1,000; call 1,001 is refused", async () => {
    await single("s", 1);
    for (let call = 1; call <= 1000; call++) {
      const result = await substrate.transaction(async (tx) => {
        const held = await reserve(tx, hold("s", 0.001, { reservation_id: `c${call}` }));
        if (held.ok)
          await settle(tx, `c${call}`, { actual_usd: 0.001, nowNs: T0, idempotency_key: `k${call}` });
        return held;
      });
      if (!result.ok) throw new Error(`call ${call} was refused with ${result.code}`);
      if (call === 1000) expect(moneyString(result.availableBefore)).toBe("0.001");
    }
    expect(await accounts("s")).toEqual({ s: { spent_usd: "1", reserved_usd: "0" } });
    const refused = await substrate.transaction((tx) => reserve(tx, hold("s", 0.001)));
    expect(refused).toMatchObject({ ok: false, code: "budget_exhausted" });
  });

  it("n reservations of cost c exhaust a chain limited to n·c exactly at call n (property)", async () => {
    const cost = fc
      .tuple(fc.integer({ min: 1, max: 100_000 }), fc.integer({ min: 0, max: 8 }), fc.boolean())
      .map(([units, scale, asNumber]) => {
        const text = moneyString(new Money(units).div(new Money(10).pow(scale)));
        return asNumber ? Number(text) : text;
      });
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 60 }), cost, async (n, c) => {
        const store = createMemorySubstrate();
        const limit = moneyString(toMoney(c).times(n));
        return store.transaction(async (tx) => {
          await ensureAccount(tx, {
            account_id: "p",
            scope: "agent",
            parent_id: null,
            limit_usd: limit,
            nowNs: T0,
          });
          await ensureAccount(tx, {
            account_id: "s",
            scope: "session",
            parent_id: "p",
            limit_usd: limit,
            nowNs: T0,
          });
          for (let call = 1; call <= n; call++) {
            const held = await reserve(tx, hold("s", c, { reservation_id: `c${call}` }));
            if (!held.ok) return false;
            await settle(tx, `c${call}`, { actual_usd: c, nowNs: T0, idempotency_key: "k" });
          }
          const parent = (await tx.budgets.getAccount("p"))!;
          const refused = await reserve(tx, hold("s", c));
          return parent.spent_usd === limit && !refused.ok && refused.code === "budget_exhausted";
        });
      }),
      { numRuns: 200 },
    );
  });

  it("availableAfter is what the chain allows when read again after the hold, overruns and all (property)", async () => {
    // Amounts in thousandths of a dollar; settling above the estimate overruns an account, which
    // then reads 0 (clamped), the case where "before minus amount" could differ from a fresh read.
    const amount = fc.integer({ min: 0, max: 3_000 }).map((milli) => moneyString(new Money(milli).div(1000)));
    const step = fc.record({ estimate: amount, actual: fc.option(amount, { nil: undefined }) });
    await fc.assert(
      fc.asyncProperty(
        fc.tuple(amount, amount, amount),
        fc.array(step, { maxLength: 8 }),
        amount,
        async ([own, agentMore, orgMore], history, last) => {
          // A child is carved from its parent, so limits grow up the chain (equal when a step is 0).
          const sess = toMoney(own);
          const agent = sess.plus(agentMore);
          const org = agent.plus(orgMore);
          const store = createMemorySubstrate();
          return store.transaction(async (tx) => {
            await tree(tx, { org: moneyString(org), agent: moneyString(agent), sess: moneyString(sess) });
            for (const [i, { estimate, actual }] of history.entries()) {
              const held = await reserve(tx, hold("sess", estimate, { reservation_id: `h${i}` }));
              if (held.ok && actual !== undefined) {
                await settle(tx, `h${i}`, { actual_usd: actual, nowNs: T0, idempotency_key: `k${i}` });
              }
            }
            const chain = await accountChain(tx, "sess");
            const held = await reserve(tx, hold("sess", last, { accounts: chain }));
            if (!held.ok) return held.available.eq(await available(tx, "sess"));
            const fresh = await available(tx, "sess");
            return held.availableAfter.eq(fresh) && held.availableBefore.minus(last).eq(fresh);
          });
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe("concurrency", () => {
  it("40 concurrent $0.10 holds on $1.00 over two handles: exactly 10 succeed", async () => {
    const key = `budget-guard-race-${Math.random()}`;
    const a = createMemorySubstrate({ shared: key });
    const b = createMemorySubstrate({ shared: key });
    try {
      await a.transaction((tx) =>
        ensureAccount(tx, {
          account_id: "s",
          scope: "session",
          parent_id: null,
          limit_usd: "1.00",
          nowNs: T0,
        }),
      );
      const results = await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          (i % 2 === 0 ? a : b).transaction((tx) =>
            reserve(tx, hold("s", 0.1, { reservation_id: `race${i}` })),
          ),
        ),
      );
      expect(results.filter((r) => r.ok).length).toBe(10);
      expect(results.filter((r) => !r.ok).map((r) => !r.ok && r.code)).toEqual(
        Array(30).fill("budget_exhausted"),
      );
      const account = await b.transaction((tx) => tx.budgets.getAccount("s"));
      expect(account?.reserved_usd).toBe("1");
    } finally {
      await a.close();
      await b.close();
      deleteSharedMemory(key);
    }
  });
});

describe("planHold", () => {
  it("gives the rows reserve writes and its result, and writes nothing itself", async () => {
    await substrate.transaction((tx) => tree(tx, { org: 10, agent: 5, sess: 2 }));
    const input = hold("sess", "0.75", { fresh: true });
    const plan = await substrate.transaction(async (tx) => planHold(await accountChain(tx, "sess"), input));
    // Nothing written: the accounts are as they were and the hold does not exist.
    expect(await accounts("sess", "agent", "org")).toEqual({
      sess: { spent_usd: "0", reserved_usd: "0" },
      agent: { spent_usd: "0", reserved_usd: "0" },
      org: { spent_usd: "0", reserved_usd: "0" },
    });
    expect(await substrate.transaction((tx) => tx.budgets.getReservation(input.reservation_id))).toBeNull();
    const reserved = await substrate.transaction((tx) => reserve(tx, input));
    expect(plan.ok && reserved.ok).toBe(true);
    if (!plan.ok || !reserved.ok) return;
    expect(plan.result).toEqual(reserved);
    expect(plan.reservation).toEqual(reserved.reservation);
    const written = await substrate.transaction(async (tx) => accountChain(tx, "sess"));
    expect(plan.charged).toEqual(written);
    expect(plan.charged.map((a) => a.reserved_usd)).toEqual(["0.75", "0.75", "0.75"]);
  });

  it("refuses as reserve does, with nothing to write", async () => {
    await single("small", "0.5");
    const chain = await substrate.transaction((tx) => accountChain(tx, "small"));
    expect(planHold(chain, hold("small", "0.75"))).toMatchObject({ ok: false, code: "budget_overrun" });
    expect(() => planHold(chain, hold("other", "0.1"))).toThrow(BudgetGuardError);
    expect(() => planHold(chain, hold("small", "0.1", { ttlNs: 0 }))).toThrow(BudgetGuardError);
  });
});
