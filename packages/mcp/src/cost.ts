// The cost an MCP server reports for one tool call, read from the result's `_meta`.
// It parses only; settling the cost (and what to do without one) is the gate's.

/** The `_meta` key of a tools/call result that carries the call's actual cost in USD. */
export const COST_META_KEY = "leash/cost_usd";

const DECIMAL = /^(?:0|[1-9][0-9]*)(?:\.[0-9]+)?$/;

export type ReportedCost = { ok: true; cost: string | number } | { ok: false; problem: string } | null;

/**
 * The reported cost: a non-negative finite number or decimal text (`"0.0042"`, kept exact). Null
 * when the result reports none; `ok: false` when it reports one that is not a cost.
 */
export function reportedCost(result: { _meta?: unknown }, key = COST_META_KEY): ReportedCost {
  const meta = result._meta;
  if (typeof meta !== "object" || meta === null || !Object.hasOwn(meta, key)) return null;
  const value = (meta as Record<string, unknown>)[key];
  if (typeof value === "number" && Number.isFinite(value) && value >= 0) return { ok: true, cost: value };
  if (typeof value === "string" && DECIMAL.test(value.trim())) return { ok: true, cost: value.trim() };
  return { ok: false, problem: `${key} is ${JSON.stringify(value)}, not a non-negative amount` };
}
