// Budget accounts and their scopes: creating them (nested guards carved from a parent's remaining),
// walking a child's chain to the root, and reading what a chain still allows. No transactions opened here.
import type { BudgetAccount, BudgetScopeKind, BudgetStore, DecimalString, SubstrateTx } from "@leash/core";
import { BudgetGuardError } from "./errors.js";
import { chainAvailable, type Money, moneyString, readStoredMoney, toMoney } from "./money.js";
import { budgetsOf, requireId, requireTimestamp } from "./validate.js";

const SCOPES: ReadonlySet<string> = new Set<BudgetScopeKind>(["session", "agent", "organization", "guard"]);

export interface EnsureAccountInput {
  account_id: string;
  /** Spec §5.2 BudgetScope (PER_SESSION, PER_AGENT, PER_ORGANIZATION) plus "guard" for nested guards. */
  scope: BudgetScopeKind;
  /** The account this one is carved from (spec §5.2 `parent_guard_id`), or null for a root. */
  parent_id: string | null;
  limit_usd: number | string | Money;
  nowNs: number;
}

/**
 * Returns the account, creating it when it does not exist yet. Idempotent: the same definition
 * again returns the stored account unchanged (spent and reserved included). A different scope,
 * parent or limit for an existing id fails with `account_conflict` rather than silently winning or
 * losing, because two configurations disagreeing about one budget is a deployment error.
 *
 * A child's limit must fit in what its parent chain allows right now (`child_exceeds_parent`):
 * the child is carved from the parent's remaining. The carving is a check, not a hold: every
 * reservation on the child is also charged to each ancestor, which is what keeps the tree within
 * its limits from then on, including when siblings compete for the same parent.
 */
export async function ensureAccount(
  tx: SubstrateTx | BudgetStore,
  input: EnsureAccountInput,
): Promise<BudgetAccount> {
  const budgets = budgetsOf(tx);
  requireId(input.account_id, "account_id");
  if (!SCOPES.has(input.scope)) {
    throw new BudgetGuardError("invalid_argument", `scope must be one of ${[...SCOPES].join(", ")}`);
  }
  if (input.parent_id !== null) requireId(input.parent_id, "parent_id");
  if (input.parent_id === input.account_id) {
    throw new BudgetGuardError(
      "account_cycle",
      `account ${JSON.stringify(input.account_id)} cannot be its own parent`,
    );
  }
  requireTimestamp(input.nowNs, "nowNs");
  const limit = moneyString(toMoney(input.limit_usd));

  const existing = await budgets.getAccount(input.account_id);
  if (existing !== null) {
    const differences = describeDifferences(existing, input.scope, input.parent_id, limit);
    if (differences.length > 0) {
      throw new BudgetGuardError(
        "account_conflict",
        `account ${JSON.stringify(input.account_id)} already exists with ${differences.join(", ")}`,
      );
    }
    return existing;
  }

  if (input.parent_id !== null) {
    const parentChain = await loadChain(budgets, input.parent_id, "parent_not_found");
    const parentAvailable = chainAvailable(parentChain);
    if (toMoney(limit).gt(parentAvailable)) {
      throw new BudgetGuardError(
        "child_exceeds_parent",
        `account ${JSON.stringify(input.account_id)} asks for ${limit} but its parent chain has ${moneyString(parentAvailable)} left`,
      );
    }
  }

  const account: BudgetAccount = {
    account_id: input.account_id,
    scope: input.scope,
    parent_id: input.parent_id,
    limit_usd: limit,
    spent_usd: "0",
    reserved_usd: "0",
    created_ns: input.nowNs,
    updated_ns: input.nowNs,
    // Stamped by the engine, which knows the chain position; budget-guard does not.
    at_seq: null,
  };
  await budgets.insertAccount(account);
  return account;
}

function describeDifferences(
  existing: BudgetAccount,
  scope: BudgetScopeKind,
  parentId: string | null,
  limit: DecimalString,
): string[] {
  const differences: string[] = [];
  if (existing.scope !== scope) differences.push(`scope ${existing.scope} (not ${scope})`);
  if (existing.parent_id !== parentId) {
    differences.push(`parent ${JSON.stringify(existing.parent_id)} (not ${JSON.stringify(parentId)})`);
  }
  // Compared as numbers, not text: a store that hands back "1.0" for "1" holds the same limit.
  if (
    !readStoredMoney(existing.limit_usd, `account ${JSON.stringify(existing.account_id)} limit_usd`).eq(limit)
  ) {
    differences.push(`limit ${existing.limit_usd} (not ${limit})`);
  }
  return differences;
}

/**
 * The account and its ancestors, child first, root last. Each row is read through the store, so
 * on PostgreSQL each is locked for the rest of the transaction, always in child → root order
 * (which is what keeps two transactions on sibling accounts from deadlocking on their parent).
 * Fails with `account_not_found` for an unknown id or a dangling parent, `account_cycle` when the
 * parent links loop.
 */
export async function accountChain(
  tx: SubstrateTx | BudgetStore,
  accountId: string,
): Promise<BudgetAccount[]> {
  requireId(accountId, "accountId");
  return loadChain(budgetsOf(tx), accountId, "account_not_found");
}

async function loadChain(
  budgets: BudgetStore,
  accountId: string,
  missingCode: "account_not_found" | "parent_not_found",
): Promise<BudgetAccount[]> {
  const chain: BudgetAccount[] = [];
  const seen = new Set<string>();
  let nextId: string | null = accountId;
  while (nextId !== null) {
    if (seen.has(nextId)) {
      const path = [...chain.map((a) => a.account_id), nextId].map((id) => JSON.stringify(id)).join(" → ");
      throw new BudgetGuardError("account_cycle", `budget accounts form a cycle: ${path}`);
    }
    seen.add(nextId);
    const account = await budgets.getAccount(nextId);
    if (account === null) {
      const code = chain.length === 0 ? missingCode : "account_not_found";
      const detail =
        chain.length === 0 ? "" : ` (parent of ${JSON.stringify(chain[chain.length - 1]!.account_id)})`;
      throw new BudgetGuardError(code, `budget account ${JSON.stringify(nextId)} does not exist${detail}`);
    }
    chain.push(account);
    nextId = account.parent_id;
  }
  return chain;
}

/**
 * What a reservation against these accounts could hold right now: the minimum over every listed
 * account and all of its ancestors of (limit − spent − reserved), clamped at 0. Ancestors are
 * always included, so passing only a leaf can never overstate what is left.
 */
export async function available(
  tx: SubstrateTx | BudgetStore,
  accountIds: string | readonly string[],
): Promise<Money> {
  const budgets = budgetsOf(tx);
  const ids = typeof accountIds === "string" ? [accountIds] : accountIds;
  const accounts: BudgetAccount[] = [];
  const loaded = new Set<string>();
  for (const id of ids) {
    requireId(id, "accountIds[]");
    if (loaded.has(id)) continue;
    for (const account of await loadChain(budgets, id, "account_not_found")) {
      if (loaded.has(account.account_id)) break;
      loaded.add(account.account_id);
      accounts.push(account);
    }
  }
  return chainAvailable(accounts);
}
