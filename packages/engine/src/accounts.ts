// Which budget accounts a session draws on, by its config's scope (spec §5.2 BudgetScope) and parent guard.
// Naming and creation only; the arithmetic lives in @leash/budget-guard.
import { ensureAccount } from "@leash/budget-guard";
import type { Config, SubstrateTx } from "@leash/core";

export const guardAccountId = (guardId: string) => `guard:${guardId}`;

/** The account a session's reservations are charged to (its ancestors are charged too). */
export function sessionAccountId(
  config: Config,
  ids: { session_id: string; agent_id: string; organization_id: string },
) {
  switch (config.budget_scope) {
    case "agent":
      return `agent:${ids.organization_id}/${ids.agent_id}`;
    case "organization":
      return `org:${ids.organization_id}`;
    default:
      return `session:${ids.session_id}`;
  }
}

export function budgetEnabled(config: Config): boolean {
  return typeof config.budget_usd === "number" && config.budget_usd > 0;
}

/** Creates (idempotently) the session's budget account under its parent guard, when a budget is set. */
export async function ensureSessionAccount(
  tx: SubstrateTx,
  config: Config,
  ids: { session_id: string; agent_id: string; organization_id: string },
  nowNs: number,
): Promise<string | null> {
  if (!budgetEnabled(config)) return null;
  const account_id = sessionAccountId(config, ids);
  await ensureAccount(tx, {
    account_id,
    scope: config.budget_scope ?? "session",
    parent_id: config.parent_guard_id ? guardAccountId(config.parent_guard_id) : null,
    limit_usd: config.budget_usd as number,
    nowNs,
  });
  return account_id;
}
