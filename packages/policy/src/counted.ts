// Expands the compact counter record a decision entry carries (rule indexes, budget micro-dollars) back
// into the counter updates the evaluation made, from the policy version and the call. It judges nothing.
import type { CompiledPolicy } from "./compile.js";
import type { Per } from "./schema.js";
import { budgetPeriod, type CountedItem, type CounterUpdate, counterKey, rateWindow } from "./state.js";

/** The fields of a call the counter keys and windows come from (all in the decision entry). */
export interface CountedCall {
  readonly tool: string;
  readonly agent: string;
  readonly session: string;
  readonly unix_s: number;
}

function scope(per: Per, call: CountedCall): string {
  return per === "agent" ? call.agent : per === "session" ? call.session : call.tool;
}

/**
 * The updates `items` stand for under `policy`; undefined when an item names no limit rule of it (an
 * entry that does not belong to this version). Inverse of evaluatePolicy's `counted` for its updates.
 */
export function updatesOfCounted(
  policy: CompiledPolicy,
  items: readonly CountedItem[],
  call: CountedCall,
): CounterUpdate[] | undefined {
  const updates: CounterUpdate[] = [];
  for (const item of items) {
    const index = typeof item === "number" ? item : item[0];
    const action = policy.rules[index]?.action;
    if (action === undefined || typeof action !== "object") return undefined;
    const name = policy.rules[index]!.name;
    if ("rate" in action && typeof item === "number") {
      const per = action.rate.per ?? "tool";
      const w = rateWindow(call.unix_s, action.rate.window_s);
      updates.push({ key: counterKey(name, per, scope(per, call)), start: w.start, end: w.end, add: 1 });
    } else if ("budget_usd" in action && typeof item !== "number") {
      const add = item[1];
      if (!Number.isSafeInteger(add) || add < 0) return undefined;
      const per = action.budget_usd.per ?? "tool";
      const p = budgetPeriod(call.unix_s, action.budget_usd.period);
      updates.push({ key: counterKey(name, per, scope(per, call)), start: p.start, end: p.end, add });
    } else {
      return undefined;
    }
  }
  return updates;
}
