// The budget section of the contract suite: @leash/budget-guard's money guarantees, run on every substrate.
// It tests budget-guard over the real store (exactness, nesting, overruns, idempotency, expiry, races), not the rows.

import {
  AlreadyResolvedError,
  available,
  BudgetGuardError,
  chargeExpired,
  ensureAccount,
  expire,
  type ReserveInput,
  release,
  reserve,
  settle,
  toMoney,
} from "@leash/budget-guard";
import type { BudgetStore, Substrate, SubstrateTx } from "@leash/core";
import { describe, expect, it } from "vitest";
import { T0 } from "./fixtures.js";
import { CONCURRENCY_TIMEOUT_MS, raceWindow, twoHandles, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

const slow = { timeout: CONCURRENCY_TIMEOUT_MS };
const TTL_NS = 30_000_000_000;

function hold(
  reservationId: string,
  accountId: string,
  amount: number | string,
  extra: Partial<ReserveInput> = {},
) {
  return {
    reservation_id: reservationId,
    account_id: accountId,
    session_id: "sess-budget",
    call_number: 1,
    amount_usd: amount,
    nowNs: T0,
    ttlNs: TTL_NS,
    ...extra,
  } satisfies ReserveInput;
}

function root(tx: SubstrateTx, accountId: string, limit: string) {
  return ensureAccount(tx, {
    account_id: accountId,
    scope: "session",
    parent_id: null,
    limit_usd: limit,
    nowNs: T0,
  });
}

async function balances(sub: Substrate, ...ids: string[]): Promise<string[][]> {
  return sub.transaction(async (tx) => {
    const rows: string[][] = [];
    for (const id of ids) {
      const a = (await tx.budgets.getAccount(id))!;
      rows.push([a.account_id, a.spent_usd, a.reserved_usd]);
    }
    return rows;
  });
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    (value) => expect.fail(`expected a rejection, got ${JSON.stringify(value)}`),
    (error: unknown) => error,
  );
}

/**
 * The real store of a transaction, with a pause after every account read: a substrate that does not
 * lock the row it handed out (or serialize the transaction) then lets another transaction read the
 * same balance before this one writes it back, and the race tests see the overspend.
 */
function widenRaces(budgets: BudgetStore, sub: Substrate): BudgetStore {
  // Delegates method by method: a store may be a class instance, whose methods a spread would drop.
  return {
    getAccount: async (accountId) => {
      const account = await budgets.getAccount(accountId);
      await raceWindow(sub);
      return account;
    },
    insertAccount: (account) => budgets.insertAccount(account),
    updateAccount: (account) => budgets.updateAccount(account),
    insertReservation: (reservation) => budgets.insertReservation(reservation),
    getReservation: (reservationId) => budgets.getReservation(reservationId),
    updateReservation: (reservation) => budgets.updateReservation(reservation),
    listExpired: (nowNs, limit) => budgets.listExpired(nowNs, limit),
    listReservations: (filter) => budgets.listReservations(filter),
  };
}

export function defineBudgetContract(opts: SubstrateContractOptions): void {
  describe("budget-guard", () => {
    it(
      "1,000 holds of $0.001, each settled, exhaust $1.00 exactly at call 1,000; call 1,001 is refused",
      slow,
      async () => {
        const sub = await (await useHarness(opts)).openMigrated();
        await sub.transaction((tx) => root(tx, "acct", "1.00"));
        const lastBefore: string[] = [];
        for (let call = 1; call <= 1000; call++) {
          const outcome = await sub.transaction(async (tx) => {
            // A JS number on purpose: 0.001 has no exact binary form, and must not drift.
            const held = await reserve(tx, hold(`r${call}`, "acct", 0.001, { call_number: call }));
            if (!held.ok) return held.code;
            await settle(tx, `r${call}`, { actual_usd: 0.001, nowNs: T0, idempotency_key: `post-${call}` });
            if (call === 1000) lastBefore.push(held.availableBefore.toFixed(), held.availableAfter.toFixed());
            return "ok";
          });
          if (outcome !== "ok") expect.fail(`call ${call} was refused with ${outcome}`);
        }
        expect(lastBefore).toEqual(["0.001", "0"]);
        expect(await balances(sub, "acct")).toEqual([["acct", "1", "0"]]);
        const refused = await sub.transaction((tx) =>
          reserve(tx, hold("r1001", "acct", 0.001, { call_number: 1001 })),
        );
        expect(refused).toMatchObject({ ok: false, code: "budget_exhausted" });
        expect(await sub.transaction((tx) => tx.budgets.getReservation("r1001"))).toBeNull();
      },
    );

    it("a nested guard is carved from its parent's remaining and never spends more than the parent has", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await sub.transaction(async (tx) => {
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
          limit_usd: "0.8",
          nowNs: T0,
        });
        await ensureAccount(tx, {
          account_id: "g1a",
          scope: "guard",
          parent_id: "g1",
          limit_usd: "0.5",
          nowNs: T0,
        });
      });
      const first = await sub.transaction((tx) => reserve(tx, hold("h1", "g1a", "0.5")));
      expect(first.ok && first.reservation.account_ids).toEqual(["g1a", "g1", "org"]);
      const second = await sub.transaction((tx) => reserve(tx, hold("h2", "g2", "0.6")));
      expect(second).toMatchObject({ ok: false, code: "budget_overrun" });
      if (!second.ok) expect(second.available.toFixed()).toBe("0.5");
      // A new child can only be carved from what is left now, counting holds.
      const carve = await rejection(
        sub.transaction((tx) =>
          ensureAccount(tx, {
            account_id: "g3",
            scope: "guard",
            parent_id: "org",
            limit_usd: "0.51",
            nowNs: T0,
          }),
        ),
      );
      expect(BudgetGuardError.isInstance(carve) && carve.code).toBe("child_exceeds_parent");
      await sub.transaction((tx) => settle(tx, "h1", { actual_usd: "0.5", nowNs: T0, idempotency_key: "k" }));
      const third = await sub.transaction((tx) => reserve(tx, hold("h3", "g2", "0.5")));
      expect(third.ok).toBe(true);
      const exhausted = await sub.transaction((tx) => reserve(tx, hold("h4", "g1", "0.01")));
      expect(exhausted).toMatchObject({ ok: false, code: "budget_exhausted" });
      expect(await balances(sub, "g1a", "g1", "g2", "org")).toEqual([
        ["g1a", "0.5", "0"],
        ["g1", "0.5", "0"],
        ["g2", "0", "0.5"],
        ["org", "0.5", "0.5"],
      ]);
    });

    it("an actual above the estimate is recorded truthfully; the overrun is reported and available reads 0", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await sub.transaction(async (tx) => {
        await ensureAccount(tx, {
          account_id: "org",
          scope: "organization",
          parent_id: null,
          limit_usd: 5,
          nowNs: T0,
        });
        await ensureAccount(tx, {
          account_id: "sess",
          scope: "session",
          parent_id: "org",
          limit_usd: 1,
          nowNs: T0,
        });
      });
      await sub.transaction((tx) => reserve(tx, hold("r", "sess", "0.9")));
      const settled = await sub.transaction((tx) =>
        settle(tx, "r", { actual_usd: "1.35", nowNs: T0 + 1, idempotency_key: "post" }),
      );
      expect([settled.overrun_usd.toFixed(), settled.released_usd.toFixed()]).toEqual(["0.45", "0"]);
      expect(settled.reservation).toMatchObject({ status: "SETTLED", amount_usd: "0.9", actual_usd: "1.35" });
      expect(await balances(sub, "sess", "org")).toEqual([
        ["sess", "1.35", "0"],
        ["org", "1.35", "0"],
      ]);
      const left = await sub.transaction((tx) => available(tx, "sess"));
      expect(left.toFixed()).toBe("0");
      expect(left.isNegative()).toBe(false);
      const next = await sub.transaction((tx) => reserve(tx, hold("r2", "sess", 0)));
      expect(next).toMatchObject({ ok: false, code: "budget_exhausted" });
    });

    it("settling again with the same key returns the first result, from either handle, counting once", async () => {
      const [a, b] = await twoHandles(await useHarness(opts));
      await a.transaction(async (tx) => {
        await root(tx, "acct", "1");
        await reserve(tx, hold("r", "acct", "0.4"));
      });
      const first = await a.transaction((tx) =>
        settle(tx, "r", { actual_usd: "0.3", nowNs: T0, idempotency_key: "k" }),
      );
      const again = await b.transaction((tx) =>
        settle(tx, "r", { actual_usd: "0.3", nowNs: T0 + 9, idempotency_key: "k" }),
      );
      expect([first.replayed, again.replayed]).toEqual([false, true]);
      expect({ ...again, replayed: false }).toEqual(first);
      const other = await rejection(
        b.transaction((tx) => settle(tx, "r", { actual_usd: "0.3", nowNs: T0, idempotency_key: "k2" })),
      );
      expect(AlreadyResolvedError.isInstance(other)).toBe(true);
      expect(other).toMatchObject({ code: "already_resolved", status: "SETTLED" });
      expect(await balances(a, "acct")).toEqual([["acct", "0.3", "0"]]);
    });

    it("10 concurrent settles of one reservation with one key count the actual once", slow, async () => {
      const handles = await twoHandles(await useHarness(opts));
      await handles[0].transaction(async (tx) => {
        await root(tx, "acct", "1");
        await reserve(tx, hold("r", "acct", "0.4"));
      });
      const results = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          handles[i % 2]!.transaction((tx) =>
            settle(tx.budgets, "r", { actual_usd: "0.35", nowNs: T0 + i, idempotency_key: "k" }),
          ),
        ),
      );
      expect(results.filter((r) => !r.replayed)).toHaveLength(1);
      expect(new Set(results.map((r) => r.reservation.resolved_ns)).size).toBe(1);
      expect(await balances(handles[1], "acct")).toEqual([["acct", "0.35", "0"]]);
    });

    it("expired holds are returned, marked EXPIRED, and cannot be released afterwards", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await sub.transaction(async (tx) => {
        await root(tx, "acct", "1");
        await reserve(tx, hold("old", "acct", "0.3", { ttlNs: 100 }));
        await reserve(tx, hold("older", "acct", "0.2", { ttlNs: 50 }));
        await reserve(tx, hold("fresh", "acct", "0.1", { ttlNs: TTL_NS }));
      });
      expect(await sub.transaction((tx) => expire(tx, T0 + 49, 10))).toEqual([]);
      const expired = await sub.transaction((tx) => expire(tx, T0 + 100, 10));
      expect(expired.map((r) => [r.reservation_id, r.status, r.resolved_ns])).toEqual([
        ["older", "EXPIRED", T0 + 100],
        ["old", "EXPIRED", T0 + 100],
      ]);
      expect(await balances(sub, "acct")).toEqual([["acct", "0", "0.1"]]);
      const stored = await sub.transaction((tx) => tx.budgets.getReservation("old"));
      expect(stored?.status).toBe("EXPIRED");
      const released = await rejection(sub.transaction((tx) => release(tx, "older", { nowNs: T0 + 200 })));
      expect(released).toMatchObject({ code: "already_resolved", status: "EXPIRED" });
      expect(await sub.transaction((tx) => expire(tx, T0 + 100, 10))).toEqual([]);
    });

    it("a settlement after the hold expired still spends the actual, once, from either handle", async () => {
      const [a, b] = await twoHandles(await useHarness(opts));
      await a.transaction(async (tx) => {
        await root(tx, "acct", "1");
        await reserve(tx, hold("late", "acct", "0.3", { ttlNs: 100 }));
        await reserve(tx, hold("kept", "acct", "0.5", { ttlNs: TTL_NS }));
      });
      expect((await a.transaction((tx) => expire(tx, T0 + 100, 10))).map((r) => r.reservation_id)).toEqual([
        "late",
      ]);
      // 0.8 spent against the 0.5 left: recorded as it is, available then reads 0.
      const late = await b.transaction((tx) =>
        settle(tx, "late", { actual_usd: "0.8", nowNs: T0 + 200, idempotency_key: "k" }),
      );
      expect([late.late, late.replayed, late.overrun_usd.toFixed()]).toEqual([true, false, "0.5"]);
      expect(late.reservation).toMatchObject({ status: "SETTLED", actual_usd: "0.8", resolved_ns: T0 + 200 });
      expect(await balances(a, "acct")).toEqual([["acct", "0.8", "0.5"]]);
      expect((await b.transaction((tx) => available(tx, "acct"))).toFixed()).toBe("0");
      const again = await a.transaction((tx) =>
        settle(tx, "late", { actual_usd: "0.8", nowNs: T0 + 300, idempotency_key: "k" }),
      );
      expect({ ...again, replayed: false }).toEqual(late);
      const conflict = await rejection(
        b.transaction((tx) =>
          settle(tx, "late", { actual_usd: "0.2", nowNs: T0 + 300, idempotency_key: "k" }),
        ),
      );
      expect(BudgetGuardError.isInstance(conflict) && conflict.code).toBe("settlement_conflict");
      expect(await balances(b, "acct")).toEqual([["acct", "0.8", "0.5"]]);
      expect(await a.transaction((tx) => expire(tx, T0 + 300, 10))).toEqual([]);
    });

    it("chargeExpired keeps an expired hold spent at its estimate; a late settlement corrects it once, from either handle", async () => {
      const [a, b] = await twoHandles(await useHarness(opts));
      await a.transaction(async (tx) => {
        await root(tx, "acct", "1");
        await reserve(tx, hold("silent", "acct", "0.6", { ttlNs: 100 }));
        await reserve(tx, hold("kept", "acct", "0.1", { ttlNs: TTL_NS }));
      });
      const charged = await a.transaction((tx) => chargeExpired(tx, T0 + 100, 10));
      expect(charged.map((r) => [r.reservation_id, r.status, r.actual_usd, r.resolved_ns])).toEqual([
        ["silent", "EXPIRED", "0.6", T0 + 100],
      ]);
      expect(await balances(b, "acct")).toEqual([["acct", "0.6", "0.1"]]);
      expect(await b.transaction((tx) => tx.budgets.getReservation("silent"))).toMatchObject({
        status: "EXPIRED",
        actual_usd: "0.6",
      });
      expect(await b.transaction((tx) => chargeExpired(tx, T0 + 200, 10))).toEqual([]);
      const late = await b.transaction((tx) =>
        settle(tx, "silent", { actual_usd: "0.25", nowNs: T0 + 300, idempotency_key: "k" }),
      );
      expect([late.late, late.replayed, late.overrun_usd.toFixed()]).toEqual([true, false, "0"]);
      expect(await balances(a, "acct")).toEqual([["acct", "0.25", "0.1"]]);
      const again = await a.transaction((tx) =>
        settle(tx, "silent", { actual_usd: "0.25", nowNs: T0 + 400, idempotency_key: "k" }),
      );
      expect(again.replayed).toBe(true);
      expect(await balances(b, "acct")).toEqual([["acct", "0.25", "0.1"]]);
    });

    it("a hold commits or rolls back with the transaction it was made in", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      await sub.transaction((tx) => root(tx, "acct", "1"));
      const failure = new Error("the audit append failed");
      const error = await rejection(
        sub.transaction(async (tx) => {
          await reserve(tx, hold("r", "acct", "0.5"));
          throw failure;
        }),
      );
      expect(error).toBe(failure);
      expect(await balances(sub, "acct")).toEqual([["acct", "0", "0"]]);
      expect(await sub.transaction((tx) => tx.budgets.getReservation("r"))).toBeNull();
    });

    it(
      "40 concurrent $0.10 holds on $1.00 across two handles: exactly 10 succeed, reserved = 1.00",
      slow,
      async () => {
        const handles = await twoHandles(await useHarness(opts));
        await handles[0].transaction((tx) => root(tx, "acct", "1.00"));
        const results = await Promise.all(
          Array.from({ length: 40 }, (_, i) => {
            const sub = handles[i % 2]!;
            return sub.transaction((tx) =>
              reserve(widenRaces(tx.budgets, sub), hold(`race-${i}`, "acct", 0.1, { call_number: i })),
            );
          }),
        );
        const granted = results.filter((r) => r.ok);
        expect(granted).toHaveLength(10);
        expect(results.filter((r) => !r.ok).map((r) => (r.ok ? "" : r.code))).toEqual(
          Array(30).fill("budget_exhausted"),
        );
        const state = await handles[1].transaction(async (tx) => ({
          account: await tx.budgets.getAccount("acct"),
          pending: await tx.budgets.listReservations({ status: "PENDING" }),
        }));
        expect(state.account?.reserved_usd).toBe("1");
        expect(state.account?.spent_usd).toBe("0");
        expect(state.pending).toHaveLength(10);
      },
    );

    it(
      "40 concurrent $0.10 holds on two sibling guards under a $1.00 parent: exactly 10 succeed",
      slow,
      async () => {
        const handles = await twoHandles(await useHarness(opts));
        await handles[0].transaction(async (tx) => {
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
        const results = await Promise.all(
          Array.from({ length: 40 }, (_, i) => {
            const sub = handles[i % 2]!;
            const account = i % 4 < 2 ? "g1" : "g2";
            return sub.transaction((tx) =>
              reserve(widenRaces(tx.budgets, sub), hold(`race-${i}`, account, "0.10", { call_number: i })),
            );
          }),
        );
        expect(results.filter((r) => r.ok)).toHaveLength(10);
        const [g1, g2, org] = await balances(handles[1], "g1", "g2", "org");
        expect(org).toEqual(["org", "0", "1"]);
        // Each sibling holds its share; together exactly what the parent holds, summed as decimals.
        expect(toMoney(g1![2]!).plus(toMoney(g2![2]!)).toFixed()).toBe("1");
      },
    );
  });
}
