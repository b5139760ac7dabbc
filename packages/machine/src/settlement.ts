// A settled call's post_exec record and the session's spent figure: the transition after budget-guard's
// settle (which the engine runs on its store and the replay on its ledger). Pure; the arithmetic is settle's.
import { chainAvailable, chainOverLimit, type SettleResult, toMoney } from "@leash/budget-guard";
import type { BudgetAccount, Reservation, SessionRecord } from "@leash/core";
import { recordableErrorText } from "./call-input.js";
import type { MachineEvent } from "./types.js";

export interface SettledCall {
  readonly session: SessionRecord;
  readonly callNumber: number;
  /** The hold as it stood before settling, and what settle made of it. */
  readonly hold: Reservation;
  readonly settled: SettleResult;
  /** The session's account chain after settling. */
  readonly accounts: readonly BudgetAccount[];
  readonly success: boolean | undefined;
  readonly errorMessage: unknown;
  readonly nowNs: number;
}

/** The post_exec entry and the session row with its spent and remaining figures. */
export function postExecEvents(c: SettledCall): { events: MachineEvent[]; remaining: string } {
  const { session, settled, hold } = c;
  const remaining = chainAvailable(c.accounts).toFixed();
  const errorText = c.success === false ? recordableErrorText(c.errorMessage) : undefined;
  const data = {
    session_id: session.session_id,
    call_number: c.callNumber,
    reservation_id: hold.reservation_id,
    estimated_usd: settled.amount_usd.toFixed(),
    actual_usd: settled.actual_usd.toFixed(),
    overrun_usd: settled.overrun_usd.toFixed(),
    success: c.success ?? true,
    ...(errorText === undefined ? {} : { error_message: errorText }),
    budget_after_usd: remaining,
    // Came at or after the hold's expiry; `hold_status` EXPIRED: the hold had been charged
    // at its estimate (settled_by_expiry), and this corrects the charge to the actual.
    late: settled.late,
    hold_status: hold.status,
    // How far past its limit this left the budget (0 within it): what an overrun beyond
    // what was left amounts to, while the remaining reads 0.
    over_limit_usd: chainOverLimit(c.accounts).toFixed(),
    // The key the settlement is stored under, for replay (a retry with it is a no-op).
    idempotency_key: settled.reservation.idempotency_key,
  };
  const spent = toMoney(session.state.budget_spent_usd ?? 0).plus(settled.actual_usd);
  const row: SessionRecord = {
    ...session,
    state: { ...session.state, budget_spent_usd: spent.toNumber(), budget_remaining_usd: Number(remaining) },
    updated_ns: c.nowNs,
  };
  return {
    // The row first: the entry names the digest of every row it changes (engine/src/state-auth.ts).
    events: [
      { type: "session", row },
      { type: "entry", kind: "post_exec", data },
    ],
    remaining,
  };
}
