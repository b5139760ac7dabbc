// chargeExpired against a real substrate (the in-memory one): an unsettled hold past its TTL stays
// spent at its estimate, and a late settlement corrects it to the actual, never counting it twice.
import type { BudgetAccount, Substrate } from "@leash/core";
import { createMemorySubstrate } from "@leash/substrate-memory";
import { beforeEach, describe, expect, it } from "vitest";
import { available, ensureAccount } from "./accounts.js";
import { chargeExpired, expire } from "./expiry.js";
import { moneyString } from "./money.js";
import { release, reserve, settle } from "./reservations.js";

const T0 = 1_000_000;

let substrate: Substrate;
beforeEach(async () => {
  substrate = createMemorySubstrate();
  await substrate.transaction(async (tx) => {
    await ensureAccount(tx, {
      account_id: "org",
      scope: "organization",
      parent_id: null,
      limit_usd: 1,
      nowNs: T0,
    });
    await ensureAccount(tx, { account_id: "s", scope: "session", parent_id: "org", limit_usd: 1, nowNs: T0 });
  });
});

const place = (id: string, amount: string, ttlNs: number) =>
  substrate.transaction((tx) =>
    reserve(tx, {
      reservation_id: id,
      account_id: "s",
      session_id: "sess",
      call_number: 1,
      amount_usd: amount,
      nowNs: T0,
      ttlNs,
    }),
  );

const amounts = () =>
  substrate.transaction(async (tx) => {
    const pick = (a: BudgetAccount | null) => ({ spent: a!.spent_usd, reserved: a!.reserved_usd });
    return { s: pick(await tx.budgets.getAccount("s")), org: pick(await tx.budgets.getAccount("org")) };
  });

const left = async () => moneyString(await substrate.transaction((tx) => available(tx, "s")));

describe("chargeExpired", () => {
  it("keeps an expired hold spent at its estimate on every account of its chain", async () => {
    await place("r", "0.6", 10);
    await place("fresh", "0.1", 10_000);
    const charged = await substrate.transaction((tx) => chargeExpired(tx, T0 + 10, 10));
    expect(charged.map((r) => [r.reservation_id, r.status, r.actual_usd, r.resolved_ns])).toEqual([
      ["r", "EXPIRED", "0.6", T0 + 10],
    ]);
    expect(await amounts()).toEqual({
      s: { spent: "0.6", reserved: "0.1" },
      org: { spent: "0.6", reserved: "0.1" },
    });
    expect(await left()).toBe("0.3");
    // Nothing left to expire, and a charged hold cannot be given back by a release either.
    expect(await substrate.transaction((tx) => chargeExpired(tx, T0 + 20, 10))).toEqual([]);
    await expect(substrate.transaction((tx) => release(tx, "r", { nowNs: T0 + 20 }))).rejects.toMatchObject({
      code: "already_resolved",
    });
    expect(await substrate.transaction((tx) => expire(tx, T0 + 20, 10))).toEqual([]);
  });

  it("lets a late settlement correct the charge to the actual, down or up, once", async () => {
    await place("down", "0.6", 10);
    await place("up", "0.2", 10);
    await substrate.transaction((tx) => chargeExpired(tx, T0 + 10, 10));
    expect(await amounts()).toMatchObject({ s: { spent: "0.8", reserved: "0" } });
    const down = await substrate.transaction((tx) =>
      settle(tx, "down", { actual_usd: "0.25", nowNs: T0 + 20, idempotency_key: "k" }),
    );
    expect([down.late, down.replayed, down.reservation.status, down.reservation.actual_usd]).toEqual([
      true,
      false,
      "SETTLED",
      "0.25",
    ]);
    expect(await amounts()).toMatchObject({ s: { spent: "0.45", reserved: "0" }, org: { spent: "0.45" } });
    const up = await substrate.transaction((tx) =>
      settle(tx, "up", { actual_usd: "0.5", nowNs: T0 + 20, idempotency_key: "k" }),
    );
    expect(moneyString(up.overrun_usd)).toBe("0.3");
    expect(await amounts()).toMatchObject({ s: { spent: "0.75", reserved: "0" } });
    // The same settlement again is a replay and moves nothing.
    const again = await substrate.transaction((tx) =>
      settle(tx, "up", { actual_usd: "0.5", nowNs: T0 + 30, idempotency_key: "k" }),
    );
    expect(again.replayed).toBe(true);
    expect(await left()).toBe("0.25");
  });
});
