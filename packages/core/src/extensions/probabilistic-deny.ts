// Extension guard (spec §3.10): below 20 % of budget, deny with probability jitter × (1 − ratio).
// The random number is an input (`inputs.rng`, recorded by the runtime); without one it fails closed.
import type { DecideContext } from "../checkers/context.js";
import { deny } from "../decision.js";
import { num, truthy } from "../util/values.js";

const PROBABILISTIC = deny("probabilistic_deny");

export function denyProbability(config: Record<string, unknown>, state: Record<string, unknown>): number {
  if (!truthy(config.probabilistic_deny)) return 0;
  const budget = num(config.budget_usd);
  const initial = num(state.budget_initial_usd);
  const remaining = num(state.budget_remaining_usd);
  if (
    budget === undefined ||
    !(budget > 0) ||
    initial === undefined ||
    !(initial > 0) ||
    remaining === undefined
  )
    return 0;
  const ratio = remaining / initial;
  if (!(ratio < 0.2)) return 0;
  const jitter = Math.min(1, Math.max(0, num(config.deny_jitter_ratio) ?? 0));
  return jitter * (1 - ratio);
}

export function checkProbabilisticDeny(ctx: DecideContext) {
  const p = denyProbability(ctx.config, ctx.state);
  if (!(p > 0)) return null;
  const rng = num(ctx.inputs.rng);
  return rng === undefined || rng < p ? PROBABILISTIC : null;
}
