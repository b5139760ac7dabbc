// The data of a `settled_by_expiry` chain entry: an ALLOWed call's hold charged at its estimate when
// its TTL passed unsettled. Builds the record only; the charge itself is budget-guard's chargeExpired.
import { accountChain, chainAvailable } from "@leash/budget-guard";
import type { Reservation, SubstrateTx } from "@leash/core";

/** What replay checks a charged expiry against: the hold, the amount charged, what the budget has left. */
export async function expiryEntryData(
  tx: SubstrateTx,
  charged: Reservation,
): Promise<Record<string, unknown>> {
  const accounts = await accountChain(tx, charged.account_ids[0]!);
  return {
    session_id: charged.session_id,
    call_number: charged.call_number,
    reservation_id: charged.reservation_id,
    charged_usd: charged.amount_usd,
    budget_after_usd: chainAvailable(accounts).toFixed(),
  };
}
