// The budget section of the contract suite: where budget-guard's tests against a real substrate belong.
// For now one round trip; it is to be replaced by budget-guard contract tests (keep the signature).

import { describe, expect, it } from "vitest";
import { makeAccount, T0 } from "./fixtures.js";
import { useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

export function defineBudgetContract(opts: SubstrateContractOptions): void {
  describe("budget", () => {
    it("an account's decimal strings round-trip exactly through insertAccount and getAccount", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const account = makeAccount("budget-acct", {
        scope: "agent",
        limit_usd: "1.000",
        spent_usd: "0.999000000000000000001",
        reserved_usd: "0.000999999999999999999",
        updated_ns: T0 + 1,
      });
      await sub.transaction((tx) => tx.budgets.insertAccount(account));
      const got = await sub.transaction((tx) => tx.budgets.getAccount("budget-acct"));
      expect(got).toEqual(account);
      expect([got?.limit_usd, got?.spent_usd, got?.reserved_usd]).toEqual([
        "1.000",
        "0.999000000000000000001",
        "0.000999999999999999999",
      ]);
    });
  });
}
