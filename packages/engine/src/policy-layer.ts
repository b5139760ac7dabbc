// The policy layer: an operator's policy (@leash/policy) judges a call SP/1.0's decide and the engine's own
// guards allowed, before its budget hold. Pure and shared with the replay, so both derive one verdict.

import type { State } from "@leash/core";
import {
  applyCounterUpdates,
  type CompiledPolicy,
  type CountedCall,
  type CountedItem,
  type CounterReader,
  type CounterUpdate,
  evaluatePolicy,
  type MonitorRecord,
  type PolicyInput,
  type PolicyState,
  toolEstimate,
  updatesOfCounted,
} from "@leash/policy";
import { type EngineDecision, releasesApproval } from "./hitl-binding.js";

/** What a decision entry records of the policy layer (`data.policy`), when the policy ran. */
export interface PolicyRecord {
  readonly hash: string;
  readonly verdict: "ALLOW" | "DENY" | "HITL";
  /** The rule that decided; null when the default (or the scope) did. */
  readonly rule: string | null;
  readonly reason: string;
  /** Rules in monitor mode that would have decided otherwise (`would: "DENY rule:x"`). */
  readonly monitor: readonly MonitorRecord[];
  /** What the call adds to the limit counters; applied when the entry's verdict is ALLOW. */
  readonly counter_updates: readonly CounterUpdate[];
  /** The same, compactly (rule indexes; a budget's micro-dollars): what the entry stores. */
  readonly counted: readonly CountedItem[];
  /** Set when a human's approval released the call and the policy asked for one: the approval stands. */
  readonly approved?: true;
}

/**
 * The record as a decision entry stores it: without `hash` (the entry's `policy_hash` names the version),
 * without empty `monitor` / `counted`, and for a default ALLOW with nothing else to say only `counted`.
 * Entries written before carry `counter_updates` (the updates in full) instead of `counted`, some the
 * full PolicyRecord; they read the same.
 */
export interface StoredPolicyRecord {
  readonly hash?: string;
  /** Absent: a default ALLOW (`rule` null, reason policy_allow:default). */
  readonly verdict?: "ALLOW" | "DENY" | "HITL";
  readonly rule?: string | null;
  readonly reason?: string;
  readonly monitor?: readonly MonitorRecord[];
  readonly counted?: readonly CountedItem[];
  readonly counter_updates?: readonly CounterUpdate[];
  readonly approved?: true;
}

const DEFAULT_ALLOW = "policy_allow:default";

/** How an entry stores its counters: `counted` (compact), or `counter_updates` (entries before it). */
export type CounterForm = "counted" | "updates";

/** The form `stored` (an entry's `policy`) uses. */
export function counterFormOf(stored: unknown): CounterForm {
  return stored !== null && typeof stored === "object" && Object.hasOwn(stored, "counter_updates")
    ? "updates"
    : "counted";
}

/**
 * What an entry stores of the policy's judgement: null when the policy did not run, undefined (no
 * `policy` field, only `policy_hash`) when it allowed by default with nothing to say, else the compact
 * record. The replay re-derives the judgement, so nothing left out here is lost. `form` "updates" gives
 * the shape entries had before `counted` (so the replay compares an old entry in its own shape).
 */
export function storedRecordOf(
  record: StoredPolicyRecord | null,
  form: CounterForm = "counted",
): StoredPolicyRecord | null | undefined {
  if (record === null) return null;
  const verdict = record.verdict ?? "ALLOW";
  const rule = record.rule ?? null;
  const reason = record.reason ?? DEFAULT_ALLOW;
  const monitor = record.monitor ?? [];
  const counters: Record<string, unknown> =
    form === "updates"
      ? (record.counter_updates ?? []).length === 0
        ? {}
        : { counter_updates: record.counter_updates }
      : (record.counted ?? []).length === 0
        ? {}
        : { counted: record.counted };
  const quiet = monitor.length === 0 && record.approved !== true;
  if (quiet && verdict === "ALLOW" && rule === null && reason === DEFAULT_ALLOW) {
    if (form === "counted") return Object.keys(counters).length === 0 ? undefined : counters;
    if (Object.keys(counters).length === 0) return undefined;
  }
  return {
    verdict,
    rule,
    reason,
    ...(monitor.length === 0 ? {} : { monitor }),
    ...counters,
    ...(record.approved === true ? { approved: true as const } : {}),
  };
}

/** A decision entry's policy fields: the version in force and, unless it has nothing to say, its record. */
export function policyFields(hash: string, record: PolicyRecord | null): Record<string, unknown> {
  const stored = storedRecordOf(record);
  return stored === undefined ? { policy_hash: hash } : { policy_hash: hash, policy: stored };
}

/** The inputs of one call, as both the engine and the replay have them at the policy's step. */
export interface PolicyLayerInput {
  readonly policy: CompiledPolicy;
  /** The verdict so far (decide() and the engine's own guards). */
  readonly decision: EngineDecision;
  readonly malformed: boolean;
  readonly session: {
    readonly session_id: string;
    readonly agent_id: string;
    readonly organization_id: string;
    readonly call_count: number;
  };
  /**
   * The SP/1.0 session state decide() saw (both sides re-derive it): the conditions' `session.repeat`
   * and `session.spent_usd` come from it.
   */
  readonly state: State;
  readonly toolName: string;
  /** The digest of `paramsText` (the entry's `params_hash`), what makes two calls identical. */
  readonly paramsHash: string | null;
  /** The params' canonical text (what the entry records): conditions see it parsed, numbers as doubles. */
  readonly paramsText: string | null;
  /** The estimate the call carries (decide()'s number, or the call's own text without a budget). */
  readonly estimate: unknown;
  /** The budget as decide() saw it; null without one. */
  readonly budget: { readonly limit_usd: number; readonly remaining_usd: number } | null;
  readonly nowNs: number;
  /** The organization's counters before this call. */
  readonly counters: PolicyState | CounterReader;
}

export interface PolicyLayerResult {
  readonly decision: EngineDecision;
  /** Null when the policy did not run (the call was not allowed before it). */
  readonly record: PolicyRecord | null;
}

/**
 * The estimate a call is held at before the config's defaults: its own when it gives one, else the
 * estimate an enforced unconditional `estimate_usd` rule gives its tool (for this agent), else none.
 */
export function estimateWithPolicy(
  policy: CompiledPolicy | undefined,
  toolName: string,
  session: { readonly agent_id: string; readonly organization_id: string },
  given: unknown,
): unknown {
  if ((given !== undefined && given !== null) || policy === undefined) return given;
  return (
    toolEstimate(policy, { tool: toolName, agent: session.agent_id, org: session.organization_id }) ?? given
  );
}

/** True for a reason the policy layer gives (policy_violation:rule:x, policy_hitl:…, policy_error:…, default deny). */
export function isPolicyReason(reason: string): boolean {
  return (
    reason.startsWith("policy_violation:rule:") ||
    reason.startsWith("policy_hitl:rule:") ||
    reason.startsWith("policy_error:rule:") ||
    reason === "policy_violation:default_deny"
  );
}

function estimateOf(value: unknown): number | undefined {
  const n = typeof value === "string" && value.trim() !== "" ? Number(value) : value;
  return typeof n === "number" && Number.isFinite(n) && n >= 0 ? n : undefined;
}

/**
 * Earlier consecutive identical calls (same tool, same params digest) the session allowed: SP/1.0's own
 * repeat count (feedback counts it), read only when this call continues the run.
 */
function repeatOf(p: PolicyLayerInput): number {
  const { state } = p;
  if (p.paramsHash === null || state.last_tool_name !== p.toolName) return 0;
  if (state.last_tool_params_hash !== p.paramsHash) return 0;
  const count = state.repeat_counts?.[p.toolName];
  return typeof count === "number" && Number.isFinite(count) && count > 0 ? count : 0;
}

function spentOf(state: State): number {
  const spent = state.budget_spent_usd;
  return typeof spent === "number" && Number.isFinite(spent) && spent > 0 ? spent : 0;
}

/**
 * Earlier calls of the session that were not allowed (refused, or paused for a human): its calls so far
 * less SP/1.0's count of allowed ones (`total_calls`, which feedback adds to on every final ALLOW).
 */
function deniedOf(p: PolicyLayerInput): number {
  const allowed = p.state.total_calls;
  const n = p.session.call_count - (typeof allowed === "number" && Number.isFinite(allowed) ? allowed : 0);
  return Math.max(n, 0);
}

/** The call as the policy sees it: every field derives from what the decision entry records. */
export function policyInputOf(p: PolicyLayerInput): PolicyInput {
  const text = p.paramsText;
  const budget = p.budget;
  // Field by field, no spreads: this runs on every call under a policy.
  return {
    tool: p.toolName,
    // Parsed only if a condition reads them, once.
    args: text === null ? {} : undefined,
    argsOf: text === null ? undefined : () => JSON.parse(text),
    agent: p.session.agent_id,
    org: p.session.organization_id,
    session: {
      id: p.session.session_id,
      calls: p.session.call_count,
      repeat: repeatOf(p),
      denied: deniedOf(p),
      spent_usd: spentOf(p.state),
    },
    budget:
      budget === null
        ? undefined
        : {
            limit_usd: budget.limit_usd,
            remaining_usd: budget.remaining_usd,
            spent_usd: budget.limit_usd - budget.remaining_usd,
          },
    estimate_usd: estimateOf(p.estimate),
    time: { unix_s: Math.floor(p.nowNs / 1e9) },
  };
}

/**
 * The verdict after the policy: it runs only on an ALLOW (a DENY or HITL before it stands; a policy can
 * only tighten). Its DENY and HITL carry the rule's reason; a call a human's approval released is not
 * asked again (the approval answers the policy's HITL too), though a DENY rule still refuses it.
 */
export function judgeByPolicy(p: PolicyLayerInput): PolicyLayerResult {
  if (p.malformed || p.decision.verdict !== "ALLOW") return { decision: p.decision, record: null };
  const outcome = evaluatePolicy(p.policy, policyInputOf(p), p.counters);
  const approved = outcome.verdict === "HITL" && releasesApproval(p.decision);
  const record: PolicyRecord = {
    hash: outcome.policy_hash,
    verdict: outcome.verdict,
    rule: outcome.rule ?? null,
    reason: outcome.reason,
    monitor: outcome.monitor,
    counter_updates: outcome.counterUpdates,
    counted: outcome.counted,
  };
  if (approved) (record as { approved?: true }).approved = true;
  if (outcome.verdict === "ALLOW" || approved) return { decision: p.decision, record };
  return { decision: { verdict: outcome.verdict, reason: outcome.reason } as EngineDecision, record };
}

/** The fields of a decision entry's data the counter keys come from. */
export function countedCallOf(data: Record<string, unknown>, nowNs: number): CountedCall {
  return {
    tool: typeof data.tool_name === "string" ? data.tool_name : "",
    agent: typeof data.agent_id === "string" ? data.agent_id : "",
    session: typeof data.session_id === "string" ? data.session_id : "",
    unix_s: Math.floor(nowNs / 1e9),
  };
}

/**
 * The counter updates a record stands for: its full `counter_updates` (a PolicyRecord, or an entry
 * written before `counted`), else its `counted` expanded under `policy` (the entry's version). Empty
 * when it has none, or its items do not fit that version.
 */
export function updatesOf(
  record: StoredPolicyRecord | null | undefined,
  policy: CompiledPolicy | undefined,
  call: CountedCall,
): readonly CounterUpdate[] {
  if (record == null) return [];
  if (record.counter_updates !== undefined) return record.counter_updates;
  const items = record.counted;
  if (items === undefined || items.length === 0 || policy === undefined) return [];
  return updatesOfCounted(policy, items, call) ?? [];
}

/** The counters after an entry: a policy's updates count only when the call was allowed in the end. */
export function countedAfter(
  counters: PolicyState,
  updates: readonly CounterUpdate[],
  verdict: string,
  nowNs: number,
): PolicyState {
  if (verdict !== "ALLOW" || updates.length === 0) return counters;
  return applyCounterUpdates(counters, updates, Math.floor(nowNs / 1e9));
}
