// Accounts, scopes and chains against a real substrate (the in-memory one), never a hand-written fake.
// The same guarantees on SQLite and PostgreSQL are checked by @leash/substrate-contract's budget suite.
import type { Substrate } from "@leash/core";
import { createMemorySubstrate } from "@leash/substrate-memory";
import { beforeEach, describe, expect, it } from "vitest";
import { accountChain, available, ensureAccount } from "./accounts.js";
import { BudgetGuardError } from "./errors.js";
import { moneyString } from "./money.js";
import { reserve, settle } from "./reservations.js";

let substrate: Substrate;
beforeEach(() => {
  substrate = createMemorySubstrate();
});

async function codeOf(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
  } catch (error) {
    if (BudgetGuardError.isInstance(error)) return error.code;
    throw error;
  }
  return undefined;
}

const T0 = 1_000;

describe("ensureAccount", () => {
  it("creates an account with canonical amounts and zero spent and reserved", async () => {
    const account = await substrate.transaction((tx) =>
      ensureAccount(tx, {
        account_id: "org",
        scope: "organization",
        parent_id: null,
        limit_usd: "100.50",
        nowNs: T0,
      }),
    );
    expect(account).toEqual({
      account_id: "org",
      scope: "organization",
      parent_id: null,
      limit_usd: "100.5",
      spent_usd: "0",
      reserved_usd: "0",
      created_ns: T0,
      updated_ns: T0,
      // The chain position is the engine's to stamp; budget-guard leaves it unset.
      at_seq: null,
    });
    const stored = await substrate.transaction((tx) => tx.budgets.getAccount("org"));
    expect(stored).toEqual(account);
  });

  it("is idempotent: the same definition again returns the stored account, spending included", async () => {
    const define = { account_id: "s1", scope: "session" as const, parent_id: null, limit_usd: 1, nowNs: T0 };
    await substrate.transaction((tx) => ensureAccount(tx, define));
    await substrate.transaction(async (tx) => {
      await reserve(tx, {
        reservation_id: "r1",
        account_id: "s1",
        session_id: "s1",
        call_number: 1,
        amount_usd: "0.25",
        nowNs: T0,
        ttlNs: 1e9,
      });
    });
    const again = await substrate.transaction((tx) =>
      ensureAccount(tx, { ...define, limit_usd: "1.000", nowNs: T0 + 5 }),
    );
    expect(again.reserved_usd).toBe("0.25");
    expect(again.created_ns).toBe(T0);
  });

  it("fails with account_conflict when the id exists with another limit, scope or parent", async () => {
    await substrate.transaction(async (tx) => {
      await ensureAccount(tx, {
        account_id: "org",
        scope: "organization",
        parent_id: null,
        limit_usd: 10,
        nowNs: T0,
      });
      await ensureAccount(tx, { account_id: "a", scope: "agent", parent_id: "org", limit_usd: 5, nowNs: T0 });
    });
    const base = {
      account_id: "a",
      scope: "agent" as const,
      parent_id: "org" as string | null,
      limit_usd: 5,
      nowNs: T0,
    };
    await expect(
      codeOf(substrate.transaction((tx) => ensureAccount(tx, { ...base, limit_usd: 6 }))),
    ).resolves.toBe("account_conflict");
    await expect(
      codeOf(substrate.transaction((tx) => ensureAccount(tx, { ...base, scope: "session" }))),
    ).resolves.toBe("account_conflict");
    await expect(
      codeOf(substrate.transaction((tx) => ensureAccount(tx, { ...base, parent_id: null }))),
    ).resolves.toBe("account_conflict");
  });

  it("carves a child from its parent's remaining: a child above what the parent has left is refused", async () => {
    await substrate.transaction(async (tx) => {
      await ensureAccount(tx, {
        account_id: "org",
        scope: "organization",
        parent_id: null,
        limit_usd: 10,
        nowNs: T0,
      });
      await reserve(tx, {
        reservation_id: "r",
        account_id: "org",
        session_id: "x",
        call_number: 1,
        amount_usd: 4,
        nowNs: T0,
        ttlNs: 1e9,
      });
      await settle(tx, "r", { actual_usd: 3, nowNs: T0, idempotency_key: "k" }); // org: 7 left
    });
    await expect(
      codeOf(
        substrate.transaction((tx) =>
          ensureAccount(tx, {
            account_id: "a",
            scope: "agent",
            parent_id: "org",
            limit_usd: "7.01",
            nowNs: T0,
          }),
        ),
      ),
    ).resolves.toBe("child_exceeds_parent");
    const child = await substrate.transaction((tx) =>
      ensureAccount(tx, { account_id: "a", scope: "agent", parent_id: "org", limit_usd: 7, nowNs: T0 }),
    );
    expect(child.limit_usd).toBe("7");
    // The grandparent counts too: a grandchild is bounded by the least its whole chain has left.
    await expect(
      codeOf(
        substrate.transaction((tx) =>
          ensureAccount(tx, { account_id: "s", scope: "session", parent_id: "a", limit_usd: 8, nowNs: T0 }),
        ),
      ),
    ).resolves.toBe("child_exceeds_parent");
  });

  it("fails with parent_not_found for an unknown parent, and writes nothing", async () => {
    await expect(
      codeOf(
        substrate.transaction((tx) =>
          ensureAccount(tx, {
            account_id: "s",
            scope: "session",
            parent_id: "ghost",
            limit_usd: 1,
            nowNs: T0,
          }),
        ),
      ),
    ).resolves.toBe("parent_not_found");
    await expect(substrate.transaction((tx) => tx.budgets.getAccount("s"))).resolves.toBeNull();
  });

  it("rejects bad input before touching the store", async () => {
    const ok = { account_id: "x", scope: "session" as const, parent_id: null, limit_usd: 1, nowNs: T0 };
    const cases: [object, string][] = [
      [{ limit_usd: -1 }, "invalid_amount"],
      [{ limit_usd: Number.NaN }, "invalid_amount"],
      [{ account_id: "" }, "invalid_argument"],
      [{ scope: "team" }, "invalid_argument"],
      [{ nowNs: Number.POSITIVE_INFINITY }, "invalid_argument"],
      [{ parent_id: "x" }, "account_cycle"],
    ];
    for (const [change, code] of cases) {
      await expect(
        codeOf(substrate.transaction((tx) => ensureAccount(tx, { ...ok, ...change } as typeof ok))),
      ).resolves.toBe(code);
    }
  });

  it("accepts the budget store itself as well as the transaction", async () => {
    const account = await substrate.transaction((tx) =>
      ensureAccount(tx.budgets, {
        account_id: "s",
        scope: "session",
        parent_id: null,
        limit_usd: 2,
        nowNs: T0,
      }),
    );
    expect(account.limit_usd).toBe("2");
  });
});

describe("accountChain", () => {
  beforeEach(async () => {
    await substrate.transaction(async (tx) => {
      await ensureAccount(tx, {
        account_id: "org",
        scope: "organization",
        parent_id: null,
        limit_usd: 100,
        nowNs: T0,
      });
      await ensureAccount(tx, {
        account_id: "agent",
        scope: "agent",
        parent_id: "org",
        limit_usd: 10,
        nowNs: T0,
      });
      await ensureAccount(tx, {
        account_id: "sess",
        scope: "session",
        parent_id: "agent",
        limit_usd: 1,
        nowNs: T0,
      });
    });
  });

  it("walks child → … → root", async () => {
    const chain = await substrate.transaction((tx) => accountChain(tx, "sess"));
    expect(chain.map((a) => a.account_id)).toEqual(["sess", "agent", "org"]);
    const root = await substrate.transaction((tx) => accountChain(tx, "org"));
    expect(root.map((a) => a.account_id)).toEqual(["org"]);
  });

  it("fails with account_not_found for an unknown id or a dangling parent link", async () => {
    await expect(codeOf(substrate.transaction((tx) => accountChain(tx, "nope")))).resolves.toBe(
      "account_not_found",
    );
    await substrate.transaction(async (tx) => {
      const agent = (await tx.budgets.getAccount("agent"))!;
      await tx.budgets.updateAccount({ ...agent, parent_id: "deleted-org" });
    });
    await expect(codeOf(substrate.transaction((tx) => accountChain(tx, "sess")))).resolves.toBe(
      "account_not_found",
    );
  });

  it("detects a cycle in the parent links instead of looping", async () => {
    // Written straight through the store: budget-guard itself never creates a cycle.
    await substrate.transaction(async (tx) => {
      const org = (await tx.budgets.getAccount("org"))!;
      await tx.budgets.updateAccount({ ...org, parent_id: "sess" });
    });
    let caught: unknown;
    try {
      await substrate.transaction((tx) => accountChain(tx, "sess"));
    } catch (error) {
      caught = error;
    }
    expect(BudgetGuardError.isInstance(caught) && caught.code).toBe("account_cycle");
    expect((caught as Error).message).toContain('"sess" → "agent" → "org" → "sess"');
  });
});

describe("available", () => {
  it("is the least (limit − spent − reserved) over the chain, ancestors always included", async () => {
    const result = await substrate.transaction(async (tx) => {
      await ensureAccount(tx, {
        account_id: "org",
        scope: "organization",
        parent_id: null,
        limit_usd: 3,
        nowNs: T0,
      });
      await ensureAccount(tx, {
        account_id: "a1",
        scope: "agent",
        parent_id: "org",
        limit_usd: 2,
        nowNs: T0,
      });
      await ensureAccount(tx, {
        account_id: "a2",
        scope: "agent",
        parent_id: "org",
        limit_usd: 2,
        nowNs: T0,
      });
      await reserve(tx, {
        reservation_id: "r",
        account_id: "a2",
        session_id: "s",
        call_number: 1,
        amount_usd: "1.5",
        nowNs: T0,
        ttlNs: 1e9,
      });
      return {
        a1: await available(tx, "a1"),
        a1AsList: await available(tx, ["a1", "org", "a1"]),
        a2: await available(tx, "a2"),
        org: await available(tx, ["org"]),
        none: await available(tx, []),
      };
    });
    // a1 has 2 of its own, but its parent only 1.5 after a2's hold.
    expect(moneyString(result.a1)).toBe("1.5");
    expect(moneyString(result.a1AsList)).toBe("1.5");
    expect(moneyString(result.a2)).toBe("0.5");
    expect(moneyString(result.org)).toBe("1.5");
    expect(moneyString(result.none)).toBe("0");
  });
});
