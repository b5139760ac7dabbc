// Which budget accounts a session draws on: the naming is the state machine's (@leash/machine);
// creating the session's account in a store is here. The arithmetic lives in @leash/budget-guard.
import { ensureAccount } from "@leash/budget-guard";
import type { Config, SubstrateTx } from "@leash/core";
import { type SessionIds, sessionAccountInput } from "@leash/machine";

export { budgetEnabled, guardAccountId, sessionAccountId } from "@leash/machine";

/** Creates (idempotently) the session's budget account under its parent guard, when a budget is set. */
export async function ensureSessionAccount(
  tx: SubstrateTx,
  config: Config,
  ids: SessionIds,
  nowNs: number,
): Promise<string | null> {
  const input = sessionAccountInput(config, ids, nowNs);
  if (input === null) return null;
  await ensureAccount(tx, input);
  return input.account_id;
}
