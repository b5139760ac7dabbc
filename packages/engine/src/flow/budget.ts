// The budget calls: a call's post-exec settlement (budget-guard's settle, recorded as post_exec), named
// guards, and holds charged at expiry. The arithmetic is budget-guard's; this module records it.
import {
  accountChain,
  BudgetGuardError,
  chargeExpired,
  ensureAccount,
  type Money,
  type SettleResult,
  settle,
  toMoney,
} from "@leash/budget-guard";
import type { Reservation, SubstrateTx } from "@leash/core";
import { budgetEnabled, guardAccountId, holdId, postExecEvents, sessionAccountId } from "@leash/machine";
import { LeashError } from "../errors.js";
import { expiryEntryData } from "../expiry-entry.js";
import { runSteps } from "../steps.js";
import { callIdOf, defined, type EngineSpan, SPAN_POST_EXEC } from "../tracing.js";
import type { PostExecRequest, PostExecResult } from "../types.js";
import type { EngineContext } from "./context.js";
import { applied } from "./run.js";
import { loadSession } from "./sessions.js";
import { endSpan, postExecAttributes } from "./spans.js";

/** Engine.createGuard's guard. */
export interface GuardInput {
  guard_id: string;
  limit_usd: number | string;
  parent_guard_id?: string;
}

function neverAllowed(sessionId: string, callNumber: number): LeashError {
  return new LeashError(
    "reservation_not_found",
    `call ${callNumber} of session ${sessionId} was never allowed: there is nothing to settle`,
  );
}
/**
 * Settles a call's hold once. The same actual again is a replay, whatever idempotency key it
 * comes with; another actual is a settlement_conflict, and the first settlement stands.
 */
async function settleOnce(
  tx: SubstrateTx,
  hold: Reservation,
  actual: Money,
  nowNs: number,
  idempotencyKey: string,
): Promise<SettleResult> {
  const key =
    hold.status === "SETTLED" && hold.actual_usd !== null && toMoney(hold.actual_usd).eq(actual)
      ? (hold.idempotency_key ?? idempotencyKey)
      : idempotencyKey;
  try {
    return await settle(tx, hold.reservation_id, { actual_usd: actual, nowNs, idempotency_key: key });
  } catch (error) {
    if (
      BudgetGuardError.isInstance(error) &&
      (error.code === "settlement_conflict" || error.code === "already_resolved")
    ) {
      throw new LeashError(
        "settlement_conflict",
        `call ${hold.call_number} of session ${hold.session_id}: ${error.message}`,
        { cause: error },
      );
    }
    throw error;
  }
}
function postExecIn(ctx: EngineContext, request: PostExecRequest, span: EngineSpan): Promise<PostExecResult> {
  const { clock, auditor } = ctx;
  if (typeof request !== "object" || request === null) {
    return Promise.reject(new LeashError("invalid_argument", "postExec needs a request object"));
  }
  const { call_number: callNumber } = request;
  if (!Number.isSafeInteger(callNumber) || callNumber < 1) {
    return Promise.reject(
      new LeashError("invalid_argument", "call_number must be a whole number of at least 1"),
    );
  }
  let actual: Money;
  try {
    actual = toMoney(request.actual_cost_usd);
  } catch (cause) {
    return Promise.reject(
      new LeashError("invalid_argument", `actual_cost_usd: ${(cause as Error).message}`, { cause }),
    );
  }
  return ctx.transaction(async (tx) => {
    const session = await loadSession(tx, request.session_id);
    const nowNs = clock.nowNs();
    if (!budgetEnabled(session.config)) {
      // Without a budget no hold records which calls were allowed; a call never evaluated is
      // still refused.
      if (callNumber > session.call_count) throw neverAllowed(session.session_id, callNumber);
      return {
        session_id: session.session_id,
        call_number: callNumber,
        actual_usd: actual.toFixed(),
        overrun_usd: "0",
        budget_remaining_usd: null,
        replayed: false,
        late: false,
      };
    }
    const id = holdId(session.session_id, callNumber);
    const hold = await tx.budgets.getReservation(id);
    if (hold === null) throw neverAllowed(session.session_id, callNumber);
    const settled = await settleOnce(tx, hold, actual, nowNs, request.idempotency_key ?? `postexec:${id}`);
    const accounts = await accountChain(tx, sessionAccountId(session.config, session));
    const { events, remaining } = postExecEvents({
      session,
      callNumber,
      hold,
      settled,
      accounts,
      success: request.success,
      errorMessage: request.error_message,
      nowNs,
    });
    if (!settled.replayed) {
      const [entry] = await runSteps(applied(tx, auditor, events, nowNs));
      if (span.recording) span.set({ "leash.chain.seq": entry!.seq });
    }
    return {
      session_id: session.session_id,
      call_number: callNumber,
      actual_usd: settled.actual_usd.toFixed(),
      overrun_usd: settled.overrun_usd.toFixed(),
      budget_remaining_usd: remaining,
      replayed: settled.replayed,
      late: settled.late,
    };
  });
}

export function postExec(ctx: EngineContext, request: PostExecRequest): Promise<PostExecResult> {
  const { tracing } = ctx;
  const span = tracing.start(SPAN_POST_EXEC, request?.traceparent, () =>
    defined({
      "gen_ai.operation.name": "execute_tool",
      "gen_ai.tool.call.id": callIdOf(request?.call_id, undefined),
      "leash.session_id": typeof request?.session_id === "string" ? request.session_id : undefined,
      "leash.call_number": typeof request?.call_number === "number" ? request.call_number : undefined,
    }),
  );
  const answer = postExecIn(ctx, request, span);
  return span.recording ? answer.then(...endSpan(span, postExecAttributes)) : answer;
}

export function createGuard(ctx: EngineContext, guard: GuardInput): Promise<void> {
  const { clock, auditor } = ctx;
  return ctx.transaction(async (tx) => {
    const nowNs = clock.nowNs();
    const account = await ensureAccount(tx, {
      account_id: guardAccountId(guard.guard_id),
      scope: "guard",
      parent_id: guard.parent_guard_id ? guardAccountId(guard.parent_guard_id) : null,
      limit_usd: guard.limit_usd,
      nowNs,
    });
    if (account.created_ns === nowNs) {
      await auditor.record(
        tx,
        "guard_created",
        {
          guard_id: guard.guard_id,
          parent_guard_id: guard.parent_guard_id ?? null,
          limit_usd: account.limit_usd,
        },
        nowNs,
      );
    }
  });
}

export function expireReservations(ctx: EngineContext, limit = 1000): Promise<number> {
  const { clock, auditor } = ctx;
  return ctx.transaction(async (tx) => {
    const nowNs = clock.nowNs();
    // An ALLOWed call's hold stays spent at its estimate (the call may have run); a late
    // post-exec corrects it to the actual.
    const charged = await chargeExpired(tx, nowNs, limit);
    for (const r of charged) {
      await auditor.record(tx, "settled_by_expiry", await expiryEntryData(tx, r), nowNs);
    }
    return charged.length;
  });
}
