// Which budget accounts a session draws on, by its config's scope (spec §5.2 BudgetScope) and parent guard.
// Naming only; creating them is budget-guard's ensureAccount, which engine and replay run on their ledgers.
import type { EnsureAccountInput } from "@leash/budget-guard";
import type { Config } from "@leash/core";

export const guardAccountId = (guardId: string) => `guard:${guardId}`;

export interface SessionIds {
  readonly session_id: string;
  readonly agent_id: string;
  readonly organization_id: string;
}

/** The account a session's reservations are charged to (its ancestors are charged too). */
export function sessionAccountId(config: Config, ids: SessionIds) {
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

/** The session's budget account (under its parent guard) that registering creates, or null without a budget. */
export function sessionAccountInput(
  config: Config,
  ids: SessionIds,
  nowNs: number,
): EnsureAccountInput | null {
  if (!budgetEnabled(config)) return null;
  return {
    account_id: sessionAccountId(config, ids),
    scope: config.budget_scope ?? "session",
    parent_id: config.parent_guard_id ? guardAccountId(config.parent_guard_id) : null,
    limit_usd: config.budget_usd as number,
    nowNs,
  };
}
