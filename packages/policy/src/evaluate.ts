// evaluatePolicy: a compiled policy, one call and the limit counters → the policy layer's outcome, purely.
// It runs after nothing and decides nothing for SP/1.0: the engine combines it with the certified decide.

import { CallBindings } from "./bindings.js";
import { type CompiledPolicy, type CompiledRule, ruleMatches, toolTags } from "./compile.js";
import { MAX_ARG_STRING, MAX_ARG_VALUES, MAX_ITERATION } from "./limits.js";
import type { Per } from "./schema.js";
import {
  budgetPeriod,
  type CountedItem,
  type CounterReader,
  type CounterUpdate,
  counted,
  counterKey,
  type PolicyState,
  rateWindow,
} from "./state.js";

export interface PolicyInput {
  readonly tool: string;
  readonly args?: unknown;
  /** The args, computed only if a condition needs them (when `args` is not given). */
  readonly argsOf?: () => unknown;
  readonly agent: string;
  readonly org?: string;
  /**
   * Tags the caller gives the call, besides those the policy's `tags:` gives its tool (a rule's
   * `match.tags` and the condition's `tags` see both).
   */
  readonly tags?: readonly string[];
  readonly session?: {
    readonly id?: string;
    readonly calls?: number;
    /** Earlier calls in this session with the same tool and arguments. */
    readonly repeat?: number;
    /** Earlier calls in this session that were not allowed (see the README's Variables). */
    readonly denied?: number;
    readonly spent_usd?: number;
  };
  readonly budget?: {
    readonly limit_usd?: number;
    readonly spent_usd?: number;
    readonly remaining_usd?: number;
  };
  /** The call's own estimate, when it has one. */
  readonly estimate_usd?: number;
  readonly time: { readonly unix_s: number };
}

export type PolicyVerdict = "ALLOW" | "DENY" | "HITL";

export interface MonitorRecord {
  readonly rule: string;
  /** What the rule would have done, as `DENY rule:big-payments`. */
  readonly would: string;
  readonly reason: string;
}

export interface PolicyOutcome {
  /** ALLOW means the policy does not object; SP/1.0's decide still runs. */
  readonly verdict: PolicyVerdict;
  /** The rule that decided, or undefined when the default did. */
  readonly rule: string | undefined;
  readonly reason: string;
  /** For the agent, on DENY and HITL. */
  readonly message: string | undefined;
  /** Rules in monitor mode that would have decided otherwise, in rule order. */
  readonly monitor: readonly MonitorRecord[];
  /** An estimate an `estimate_usd` rule supplied to a call that had none. */
  readonly estimate_usd: number | undefined;
  /**
   * The counters to add when the call goes ahead: at once on ALLOW, after a human's approval on HITL;
   * empty on DENY (a refused call uses no quota).
   */
  readonly counterUpdates: readonly CounterUpdate[];
  /**
   * The same updates, compactly (rule index, and for a budget the micro-dollars): what a decision entry
   * records, expanded again by `updatesOfCounted` with the policy and the call.
   */
  readonly counted: readonly CountedItem[];
  /** The policy version that decided. */
  readonly policy_hash: string;
}

type Step =
  | {
      readonly kind: "pass";
      readonly update?: CounterUpdate;
      readonly item?: CountedItem;
      readonly estimate?: number;
    }
  | {
      readonly kind: "decide";
      readonly verdict: PolicyVerdict;
      readonly reason: string;
      readonly message: string;
    };

const MICRO = 1_000_000;
const toMicros = (usd: number) => Math.round(usd * MICRO);

/** Whether every list, map and string in `args` is within the bounds an iterating rule was costed for. */
function argsWithinBounds(args: unknown): boolean {
  const stack: unknown[] = [args];
  let visited = 0;
  while (stack.length > 0) {
    const v = stack.pop();
    if (++visited > MAX_ARG_VALUES) return false;
    if (typeof v === "string") {
      if (v.length > MAX_ARG_STRING) return false;
    } else if (Array.isArray(v)) {
      if (v.length > MAX_ITERATION) return false;
      stack.push(...v);
    } else if (typeof v === "object" && v !== null) {
      const values = Object.values(v);
      if (values.length > MAX_ITERATION) return false;
      stack.push(...values);
    }
  }
  return true;
}

function scopeOf(per: Per, input: PolicyInput): string {
  if (per === "agent") return input.agent;
  if (per === "session") return input.session?.id ?? "";
  return input.tool;
}

const violation = (rule: CompiledRule, message: string): Step => ({
  kind: "decide",
  verdict: "DENY",
  reason: `policy_violation:rule:${rule.name}`,
  message: rule.message ?? message,
});

function applyAction(
  rule: CompiledRule,
  input: PolicyInput,
  state: PolicyState | CounterReader,
  estimate: number | undefined,
): Step {
  const a = rule.action;
  if (a === "allow")
    return { kind: "decide", verdict: "ALLOW", reason: `policy_allow:rule:${rule.name}`, message: "" };
  if (a === "deny") return violation(rule, `denied by policy rule ${rule.name}`);
  if (a === "hitl") {
    const message = rule.message ?? `policy rule ${rule.name} asks a human to approve this call`;
    return { kind: "decide", verdict: "HITL", reason: `policy_hitl:rule:${rule.name}`, message };
  }
  if ("rate" in a) {
    const per = a.rate.per ?? "tool";
    const key = counterKey(rule.name, per, scopeOf(per, input));
    const w = rateWindow(input.time.unix_s, a.rate.window_s);
    if (counted(state, key, w.start) >= a.rate.limit) {
      return violation(rule, `rate limit: at most ${a.rate.limit} calls per ${a.rate.window_s} s per ${per}`);
    }
    return { kind: "pass", update: { key, start: w.start, end: w.end, add: 1 }, item: rule.index };
  }
  if ("budget_usd" in a) {
    if (estimate === undefined)
      return violation(rule, "this tool's budget needs a cost estimate for the call");
    const per = a.budget_usd.per ?? "tool";
    const key = counterKey(rule.name, per, scopeOf(per, input));
    const p = budgetPeriod(input.time.unix_s, a.budget_usd.period);
    const add = toMicros(estimate);
    if (counted(state, key, p.start) + add > toMicros(a.budget_usd.limit)) {
      return violation(rule, `budget: at most $${a.budget_usd.limit} per ${a.budget_usd.period} per ${per}`);
    }
    return { kind: "pass", update: { key, start: p.start, end: p.end, add }, item: [rule.index, add] };
  }
  if ("max_repeat" in a) {
    if ((input.session?.repeat ?? 0) >= a.max_repeat) {
      return violation(rule, `the same call may be repeated at most ${a.max_repeat} times`);
    }
    return { kind: "pass" };
  }
  if ("require_estimate" in a) {
    if (estimate === undefined) return violation(rule, "this tool needs a cost estimate for the call");
    return { kind: "pass" };
  }
  return estimate === undefined ? { kind: "pass", estimate: a.estimate_usd } : { kind: "pass" };
}

/**
 * The call's tags (the policy's for its tool, then the caller's) and the rules whose `match` holds: from
 * the policy's cache when the caller gives no tags of its own.
 */
function candidates(
  policy: CompiledPolicy,
  input: PolicyInput,
): { tags: readonly string[]; rules: readonly CompiledRule[] } {
  if (input.tags === undefined || input.tags.length === 0) return policy.matchOf(input.tool, input.agent);
  const tags = [...new Set([...toolTags(policy.tagSets, input.tool), ...input.tags])];
  return { tags, rules: policy.rules.filter((r) => ruleMatches(r, input.tool, input.agent, tags)) };
}

/** Whether the policy is for this call's agent and organization (a call naming no organization is). */
function inScope(policy: CompiledPolicy, input: PolicyInput): boolean {
  if (policy.agents !== undefined && !policy.agents.test(input.agent)) return false;
  return policy.org === undefined || input.org === undefined || policy.org === input.org;
}

function outcomeOf(
  policy: CompiledPolicy,
  acc: {
    monitor: readonly MonitorRecord[];
    updates: readonly CounterUpdate[];
    counted: readonly CountedItem[];
    supplied: number | undefined;
  },
  decided: { verdict: PolicyVerdict; rule: string | undefined; reason: string; message: string | undefined },
): PolicyOutcome {
  // Built field by field: this runs on every call, and a spread costs more than the rest of it.
  const deny = decided.verdict === "DENY";
  return {
    verdict: decided.verdict,
    rule: decided.rule,
    reason: decided.reason,
    message: decided.message,
    monitor: acc.monitor,
    estimate_usd: acc.supplied,
    counterUpdates: deny ? [] : acc.updates,
    counted: deny ? [] : acc.counted,
    policy_hash: policy.hash,
  };
}

const validEstimate = (v: number | undefined) =>
  v !== undefined && Number.isFinite(v) && v >= 0 ? v : undefined;

/**
 * The policy's outcome for one call. Rules run in order: a rule applies when its `match` and `when` hold;
 * allow / deny / hitl decide (first match wins); limit rules pass unless exceeded, exceeding one is a DENY.
 * A rule in monitor mode never decides: what it would have done is listed in `monitor`. A condition that
 * fails to evaluate (a missing key, a type error at run time, args too large for an iterating rule) is a
 * DENY `policy_error:rule:<name>` (fail closed). Pure: same policy, input and state → same outcome.
 */
export function evaluatePolicy(
  policy: CompiledPolicy,
  input: PolicyInput,
  state: PolicyState | CounterReader,
): PolicyOutcome {
  // The caller's clock reading: windows and periods are computed from it, so it must be a real time.
  if (!Number.isFinite(input.time?.unix_s)) throw new TypeError("input.time.unix_s must be a finite number");
  const monitor: MonitorRecord[] = [];
  const updates: CounterUpdate[] = [];
  const counted: CountedItem[] = [];
  // What enforced rules see, and what monitor rules see: an estimate a monitor rule supplies reaches
  // only other monitor rules, so monitoring never changes an enforced outcome.
  let estimate = validEstimate(input.estimate_usd);
  let shadowEstimate = estimate;
  let supplied: number | undefined;
  let bindings: CallBindings | undefined;
  let bounded: boolean | undefined;
  const done = (verdict: PolicyVerdict, rule: string | undefined, reason: string, message?: string) =>
    outcomeOf(policy, { monitor, updates, counted, supplied }, { verdict, rule, reason, message });

  if (!inScope(policy, input)) return done("ALLOW", undefined, "policy_allow:not_in_scope");
  const { tags, rules } = candidates(policy, input);
  for (const rule of rules) {
    let step: Step | undefined;
    if (rule.when !== undefined) {
      // Each variable is built (the args parsed, when given as `argsOf`) once, when a condition names it.
      bindings ??= new CallBindings(input, tags);
      if (rule.when.iterates) bounded ??= argsWithinBounds(bindings.plainArgs());
      const result =
        rule.when.iterates && !bounded ? { error: "args too large for this rule" } : rule.when.run(bindings);
      if (result === false) continue;
      if (result !== true) {
        const message = `policy rule ${rule.name} could not be evaluated: ${result.error}`;
        step = { kind: "decide", verdict: "DENY", reason: `policy_error:rule:${rule.name}`, message };
      }
    }
    const monitored = rule.mode === "monitor";
    step ??= applyAction(rule, input, state, monitored ? shadowEstimate : estimate);
    if (step.kind === "pass") {
      if (step.update !== undefined) updates.push(step.update);
      if (step.item !== undefined) counted.push(step.item);
      if (step.estimate !== undefined) {
        shadowEstimate ??= step.estimate;
        if (!monitored) {
          estimate = step.estimate;
          supplied = step.estimate;
        }
      }
      continue;
    }
    if (monitored) {
      monitor.push({ rule: rule.name, would: `${step.verdict} rule:${rule.name}`, reason: step.reason });
      continue;
    }
    return done(step.verdict, rule.name, step.reason, step.verdict === "ALLOW" ? undefined : step.message);
  }
  if (policy.default === "deny") {
    const message = `no rule of policy ${policy.name} allows ${input.tool}`;
    if (policy.mode === "monitor") {
      monitor.push({ rule: "default", would: "DENY default", reason: "policy_violation:default_deny" });
      return done("ALLOW", undefined, "policy_allow:default");
    }
    return done("DENY", undefined, "policy_violation:default_deny", message);
  }
  return done("ALLOW", undefined, "policy_allow:default");
}
