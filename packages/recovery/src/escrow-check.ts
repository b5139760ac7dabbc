// Recovery's escrow step: the allotment invariants of every shared account (Σ allotments + spent ≤ limit,
// no shard past its allotment), and the return of dead shards' allotments after their lease. Reports; decides nothing else.
import {
  checkEscrow,
  type EscrowViolation,
  escrowOf,
  Money,
  moneyString,
  reclaimAllotment,
} from "@leash/budget-guard";
import type { BudgetAccount, BudgetAllotment, Substrate } from "@leash/core";

export interface EscrowCheck {
  /** Accounts with at least one allotment. */
  accounts: number;
  allotments: number;
  violations: { account_id: string; violation: EscrowViolation }[];
  /** Dead shards' allotments returned by this run (lease over, no open hold), charged with what they recorded. */
  reclaimed: { account_id: string; shard: string; charged_usd: string }[];
  /** Dead shards' allotments left in place: their open holds are still to be settled or expired by their shard. */
  heldBack: { account_id: string; shard: string; reserved_usd: string }[];
}

/**
 * The allotment rows are written in the same transaction as the chain entry of each decision that
 * charged them, so a row's spent + reserved is what the shard's chain recorded; the snapshot check
 * compares account + allotments with the replayed ledger. With `reclaim`, an allotment whose lease
 * ran out before `nowNs` and that holds no open hold is returned (budget-guard reclaimAllotment).
 */
export async function checkAllotments(
  substrate: Substrate,
  options: { nowNs: number; reclaim: boolean },
): Promise<EscrowCheck> {
  const report: EscrowCheck = { accounts: 0, allotments: 0, violations: [], reclaimed: [], heldBack: [] };
  const rows = await substrate.transaction(async (tx) =>
    tx.allotments === undefined ? [] : tx.allotments.listAll(),
  );
  const byAccount = new Map<string, BudgetAllotment[]>();
  for (const row of rows) byAccount.set(row.account_id, [...(byAccount.get(row.account_id) ?? []), row]);
  report.accounts = byAccount.size;
  report.allotments = rows.length;
  for (const [accountId, allotments] of byAccount) {
    const account = await substrate.transaction((tx) => tx.budgets.getAccount(accountId));
    if (account === null) continue;
    for (const violation of checkEscrow(escrowOf(account, allotments))) {
      report.violations.push({ account_id: accountId, violation });
    }
    if (!options.reclaim || report.violations.length > 0) continue;
    for (const row of allotments) {
      if (row.lease_expires_ns > options.nowNs) continue;
      if (!isZero(row.reserved_usd)) {
        report.heldBack.push({ account_id: accountId, shard: row.shard, reserved_usd: row.reserved_usd });
        continue;
      }
      const done = await substrate.transaction((tx) =>
        reclaimAllotment(tx, {
          account_id: accountId,
          shard: row.shard,
          chain_recorded_usd: row.spent_usd,
          nowNs: options.nowNs,
        }),
      );
      if (done.ok)
        report.reclaimed.push({ account_id: accountId, shard: row.shard, charged_usd: row.spent_usd });
    }
  }
  return report;
}

const isZero = (amount: string) => /^0*(\.0*)?$/.test(amount);

/** The account as the chain sees it: its own spent and reserved plus every allotment's. */
export function withAllotments(
  account: BudgetAccount,
  allotments: readonly BudgetAllotment[],
): BudgetAccount {
  if (allotments.length === 0) return account;
  const escrow = escrowOf(account, allotments);
  let spent = escrow.spent;
  let reserved = escrow.reserved;
  for (const a of escrow.allotments) {
    spent += a.spent;
    reserved += a.reserved;
  }
  return {
    ...account,
    spent_usd: moneyString(Money.fromUnits(spent)),
    reserved_usd: moneyString(Money.fromUnits(reserved)),
  };
}

/** One broken invariant in words. */
export function describeViolation(v: EscrowViolation): string {
  const usd = (u: bigint) => moneyString(Money.fromUnits(u));
  switch (v.kind) {
    case "over_limit":
      return `spent, held and allotted ${usd(v.committed)} exceeds the limit ${usd(v.limit)}`;
    case "over_allotment":
      return `shard ${v.shard} holds ${usd(v.used)} beyond its allotment of ${usd(v.granted)}`;
    default:
      return `a negative amount${v.shard === null ? "" : ` in shard ${v.shard}'s allotment`}`;
  }
}
