// The TypeScript shape of each chain entry kind's `data` (current version; `Earlier*` where an older
// version differs), and the ChainEvent union readers switch on. The schemas in ./schemas.ts are the truth.
import type { Json } from "../verify/format.js";

/** Exact decimal money ("4.25"); never a binary float. */
export type Money = string;
/** Nanoseconds since the epoch: a number within 2^53, else its exact decimal digits. */
export type Nanos = number | string;
export type NonceValue = string | number;

export interface DecisionEvent {
  session_id: string;
  agent_id: string | null;
  organization_id: string | null;
  call_number: number;
  /** Null when the call's input was malformed (then `input_problem` says why). */
  tool_name: string | null;
  params_hash: string | null;
  nonce: NonceValue | null;
  estimated_cost_usd: number | string | null;
  estimate_usd: Money | null;
  input_problem?: string;
  verdict: "ALLOW" | "DENY" | "HITL";
  reason: string;
  budget_before_usd: Money | null;
  budget_after_usd: Money | null;
  reservation_id: string | null;
  rng?: number;
  previous_error?: string;
  now_ns: Nanos;
  replay_inputs: 2;
  params_json: string | null;
  expected_params_hash?: string;
  hitl_request_id?: string;
  hold_ttl_ns?: number;
}

/**
 * What a decision records of the operator's policy layer, when the policy ran. Entries write it compact
 * (no `hash`, no empty `monitor` / `counted`; a default ALLOW only `counted`); older entries carry
 * `verdict`, `rule`, `reason` always and `counter_updates` instead of `counted`.
 */
export interface PolicyJudgement {
  /** Older entries: the policy version that judged (the decision's `policy_hash`). */
  hash?: string;
  /** Absent (with `rule` and `reason`): a default ALLOW that only counted. */
  verdict?: "ALLOW" | "DENY" | "HITL";
  /** The rule that decided; null when the default (or the policy's scope) did. */
  rule?: string | null;
  reason?: string;
  /**
   * What the call adds to the limit counters, compactly: a rate rule's index (one call), or a budget
   * rule's index and micro-dollars; key and window follow from the version, the call and `now_ns`.
   */
  counted?: (number | [number, number])[];
  /** Rules in monitor mode that would have decided otherwise (`would: "DENY rule:x"`). */
  monitor?: { rule: string; would: string; reason: string }[];
  /** Older entries: the updates in full (windows in Unix seconds); counted when the call is allowed. */
  counter_updates?: { key: string; start: number; end: number; add: number }[];
  /** A human's approval released the call the policy asked one for. */
  approved?: true;
}

/**
 * A decision by an engine with a policy: `policy_hash`, with `policy` (null: it did not run) unless the
 * policy allowed by default with nothing to say; without a policy, neither.
 */
export type DecisionPolicyFields =
  | { policy_hash: string; policy?: PolicyJudgement | null }
  | { policy_hash?: never; policy?: never };

/** A decision of replay inputs version 3: the params inline, by size alone, or stored by digest. */
export type DecisionEventV3 = Omit<DecisionEvent, "replay_inputs" | "params_json"> & {
  replay_inputs: 3;
} & DecisionPolicyFields &
  ({ params_json: string | null } | { params_bytes: number } | { params_blob: true });

/** A decision written before replay inputs version 2: open, only these fields are sure. */
export interface EarlierDecisionEvent {
  session_id: string;
  verdict: "ALLOW" | "DENY" | "HITL";
  reason: string;
  replay_inputs?: 1;
  [field: string]: Json | undefined;
}

export interface HitlRequestEvent {
  session_id: string;
  request_id: string;
  call_number: number;
  tool_name: string;
  nonce: NonceValue | null;
  args_digest: string;
  reason: string;
  budget_spent_usd: Money | null;
  budget_limit_usd: Money | null;
  budget_remaining_usd: Money | null;
  policy_id: string;
  created_ns: Nanos;
  expires_ns: Nanos;
}

export interface HitlDecisionEvent {
  session_id: string;
  request_id: string;
  call_number: number;
  tool_name: string;
  decision: "approve" | "reject" | "modify" | "defer" | "escalate";
  operator_id: string;
  nonce: NonceValue | null;
  args_digest: string;
  successor: { nonce: NonceValue; args_digest: string } | null;
  comment?: string;
}

export interface HitlExpiredEvent {
  session_id: string;
  request_id: string;
  call_number: number;
  tool_name: string;
  nonce: NonceValue | null;
  args_digest: string;
  operator_id: string;
  expires_ns: Nanos;
  now_ns: Nanos;
}

export interface PostExecEvent {
  session_id: string;
  call_number: number;
  reservation_id: string;
  estimated_usd: Money;
  actual_usd: Money;
  overrun_usd: Money;
  success: boolean;
  error_message?: string;
  budget_after_usd: Money;
  late: boolean;
  hold_status: "PENDING" | "SETTLED" | "EXPIRED" | "RELEASED";
  over_limit_usd: Money;
  idempotency_key: string;
}

export interface SessionRegisteredEvent {
  session_id: string;
  agent_id: string;
  organization_id: string;
  config: { [field: string]: Json };
}

export interface CircuitResetEvent {
  session_id: string;
  operator_id: string;
  trip_reason: string | null;
}

export interface SessionStaleEvent {
  session_id: string;
  agent_id: string | null;
  organization_id: string | null;
  previous_status: "ACTIVE" | "PAUSED";
  last_heartbeat_ns: Nanos | null;
  last_seen_ns: Nanos;
  heartbeat_interval_ms: number | null;
  missed_heartbeats: number | null;
  now_ns: Nanos;
  reason: "heartbeat_timeout";
}

export interface SessionRevivedEvent {
  session_id: string;
}

export interface GuardCreatedEvent {
  guard_id: string;
  parent_guard_id: string | null;
  limit_usd: Money;
}

export interface SettledByExpiryEvent {
  session_id: string;
  call_number: number;
  reservation_id: string;
  charged_usd: Money;
  budget_after_usd: Money;
}

/** Read only: what engines wrote before settled_by_expiry. */
export interface ReservationExpiredEvent {
  reservation_id: string;
  session_id?: string;
  call_number?: number;
  released_usd?: Money;
  [field: string]: Json | undefined;
}

export interface KeyRotationEvent {
  next_key_id: string;
  next_public_key: string;
  operator_id?: string;
}

export interface SnapshotRepairedEvent {
  chain_count: number;
  chain_head_hash: string | null;
  repaired: string[];
  left: string[];
}

export interface RollbackAcceptedEvent {
  operator_id: string;
  /** `behind`: the store ends before the checkpoint; `forked`: it has another entry there. */
  rollback: "behind" | "forked";
  checkpoint_count: number;
  checkpoint_head_hash: string;
  store_count: number;
  store_head_hash: string | null;
}

export interface PolicyPublishedEvent {
  policy_hash: string;
  name: string;
  /** The policy document with its defaults filled in, as canonical JSON; `policy_hash` is its SHA-256. */
  canonical: string;
}

/** An entry of a kind's earlier version: only the fields it has always had (`K`) are sure. */
export type Earlier<T, K extends keyof T> = Pick<T, K> & Partial<T> & { [field: string]: Json | undefined };

/** One entry's kind and data, as the schema versions of ./schemas.ts allow them. */
export type ChainEvent =
  | { kind: "decision"; data: DecisionEventV3 | DecisionEvent | EarlierDecisionEvent }
  | { kind: "hitl_request"; data: HitlRequestEvent | Earlier<HitlRequestEvent, "session_id" | "request_id"> }
  | {
      kind: "hitl_decision";
      data:
        | HitlDecisionEvent
        | Earlier<HitlDecisionEvent, "session_id" | "request_id" | "decision" | "operator_id">;
    }
  | { kind: "hitl_expired"; data: HitlExpiredEvent | Earlier<HitlExpiredEvent, "session_id" | "request_id"> }
  | { kind: "post_exec"; data: PostExecEvent | Earlier<PostExecEvent, "session_id" | "call_number"> }
  | { kind: "session_registered"; data: SessionRegisteredEvent }
  | { kind: "circuit_reset"; data: CircuitResetEvent | Earlier<CircuitResetEvent, "session_id"> }
  | { kind: "session_stale"; data: SessionStaleEvent | Earlier<SessionStaleEvent, "session_id"> }
  | { kind: "session_revived"; data: SessionRevivedEvent }
  | { kind: "guard_created"; data: GuardCreatedEvent }
  | { kind: "settled_by_expiry"; data: SettledByExpiryEvent }
  | { kind: "reservation_expired"; data: ReservationExpiredEvent }
  | { kind: "key_rotation"; data: KeyRotationEvent }
  | { kind: "snapshot_repaired"; data: SnapshotRepairedEvent }
  | { kind: "rollback_accepted"; data: RollbackAcceptedEvent }
  | { kind: "policy_published"; data: PolicyPublishedEvent };

/** The data type of one kind. */
export type ChainEventData<K extends ChainEvent["kind"]> = Extract<ChainEvent, { kind: K }>["data"];
