// What a policy says of a tool before any call: whether it can ever allow it (for hiding it from an
// agent's tool list) and the estimate it supplies. Static reading of the rules; it judges no call.
import { type CompiledPolicy, type CompiledRule, ruleMatches, toolTags } from "./compile.js";

export interface ToolOf {
  readonly tool: string;
  readonly agent: string;
  readonly org?: string;
}

/**
 * Rules that may apply to a call of this tool by this agent, enforced ones only. A call's tags are the
 * ones the policy's `tags:` gives its tool (the engine gives calls no others).
 */
function enforcedFor(policy: CompiledPolicy, t: ToolOf): CompiledRule[] {
  const tags = toolTags(policy.tagSets, t.tool);
  return policy.rules.filter((r) => r.mode === "enforce" && ruleMatches(r, t.tool, t.agent, tags));
}

function inScope(policy: CompiledPolicy, t: ToolOf): boolean {
  if (policy.agents !== undefined && !policy.agents.test(t.agent)) return false;
  return policy.org === undefined || t.org === undefined || policy.org === t.org;
}

/**
 * True when no call of `tool` by `agent` can pass the policy: the first enforced rule that may apply
 * is an unconditional `deny`, or none may allow it under `default: deny`. A rule with a `when`, a
 * `hitl` or a limit may let a call through, so the tool then counts as allowed (false).
 */
export function neverAllows(policy: CompiledPolicy, t: ToolOf): boolean {
  if (!inScope(policy, t)) return false;
  for (const rule of enforcedFor(policy, t)) {
    if (rule.action === "deny" && rule.when === undefined) return true;
    if (rule.action === "allow" || rule.action === "hitl") return false;
  }
  return policy.default === "deny" && policy.mode === "enforce";
}

/** The estimate (USD) the first enforced unconditional `estimate_usd` rule gives the tool's calls, if any. */
export function toolEstimate(policy: CompiledPolicy, t: ToolOf): number | undefined {
  if (!inScope(policy, t)) return undefined;
  for (const rule of enforcedFor(policy, t)) {
    const a = rule.action;
    if (rule.when === undefined && typeof a === "object" && "estimate_usd" in a) return a.estimate_usd;
  }
  return undefined;
}
