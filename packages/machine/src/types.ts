// The state machine's vocabulary: the synchronous view it reads, the environment that holds every
// non-deterministic input, the commands it takes and the events it emits. Types only.

import type { EnsureAccountInput } from "@leash/budget-guard";
import type {
  BudgetAccount,
  Config,
  HitlRequest,
  HitlRequestStatus,
  Nonce,
  ParamsBlob,
  Reservation,
  SessionRecord,
  State,
} from "@leash/core";
import type { EngineDecision } from "./reasons.js";

/** A row decide needs that the view does not hold: the caller fetches it and calls decide again. */
export type Key =
  | { readonly kind: "session"; readonly sessionId: string }
  | { readonly kind: "nonce"; readonly sessionId: string; readonly nonce: Nonce }
  | { readonly kind: "accounts"; readonly accountId: string }
  | { readonly kind: "hitl"; readonly requestId: string }
  | { readonly kind: "hitl_of"; readonly sessionId: string; readonly status: HitlRequestStatus };

/**
 * The state as decide reads it, synchronously. `undefined` means "not at hand" (reported as a Key,
 * never awaited); `null` means the row does not exist.
 */
export interface StateView {
  session(sessionId: string): SessionRecord | null | undefined;
  /** Whether the session has spent the nonce. */
  nonceSeen(sessionId: string, nonce: Nonce): boolean | undefined;
  /** The account chain: the account, then its ancestors. */
  accounts(accountId: string): readonly BudgetAccount[] | undefined;
  hitl(requestId: string): HitlRequest | null | undefined;
  /** The session's requests in one status. */
  hitlOf(sessionId: string, status: HitlRequestStatus): readonly HitlRequest[] | undefined;
}

/**
 * Every input of a transition that is not a function of the view and the command: the entry records
 * each (now_ns, rng, hitl_request_id, hold_ttl_ns), so a replay builds the same Env from it.
 * `rng` and `newId` are called at most once per decide, and only when the transition needs them;
 * a caller that calls decide again for the same command hands back the same draw.
 */
export interface Env {
  readonly nowNs: number;
  rng(): number;
  newId(): string;
  readonly holdTtlNs: number;
}

/** The operator's policy at its step (the engine's policy-layer.ts, with its counters bound). */
export interface PolicyStep<R = unknown> {
  readonly hash: string;
  /** The estimate a call is held at before the config's defaults (an `estimate_usd` rule). */
  estimate(toolName: string, session: SessionRecord, given: unknown): unknown;
  judge(input: PolicyStepInput): { readonly decision: EngineDecision; readonly record: R | null };
  /** The decision entry's policy fields for `record`. */
  fields(record: R | null): Record<string, unknown>;
  /** A reason this policy layer gives: its DENY counts the call and changes nothing else. */
  isPolicyReason(reason: string): boolean;
}

export interface PolicyStepInput {
  readonly decision: EngineDecision;
  readonly malformed: boolean;
  readonly session: SessionRecord;
  readonly state: State;
  readonly toolName: string;
  readonly paramsHash: string | null;
  readonly paramsText: string | null;
  readonly estimate: unknown;
  readonly budget: { readonly limit_usd: number; readonly remaining_usd: number } | null;
  readonly nowNs: number;
}

/** The params as an entry records them, when the caller has them only in that form (a replay). */
export interface RecordedParams {
  /** Their canonical text, or null when the entry kept none (over the cap, non-canonical, or legacy). */
  readonly text: string | null;
  readonly hash: string | null;
  /** Their size in bytes when the entry recorded it (over the cap) instead of the text. */
  readonly bytes: number | null;
  /** The text was stored by digest beside the chain (`params_blob`). */
  readonly blob: boolean;
}

export interface EvaluateCommand {
  readonly kind: "evaluate";
  readonly sessionId: string;
  /** Why the tool name or nonce cannot be evaluated, or null (call-input.ts). */
  readonly malformed: string | null;
  readonly toolName: string;
  readonly params: unknown;
  readonly recordedParams?: RecordedParams;
  readonly nonce: Nonce | null | undefined;
  readonly estimatedCostUsd: unknown;
  readonly previousError: unknown;
  readonly expectedHash: string | null | undefined;
  readonly policy?: PolicyStep;
  /** The replay-inputs rules in force (REPLAY_INPUTS_VERSION for a live call; an older entry's own). */
  readonly rules: number;
  /** Fold this verdict instead of deciding (an entry written before replay inputs). */
  readonly foldVerdict?: EngineDecision;
}

export interface ExpireCommand {
  readonly kind: "expire";
  readonly sessionId: string;
  readonly requestId: string;
}

export interface AnswerCommand {
  readonly kind: "answer";
  readonly sessionId: string;
  /** The request answered; without one, the session's open request. */
  readonly requestId?: string | undefined;
  readonly decision: "approve" | "reject" | "modify" | "defer" | "escalate";
  readonly operatorId: string;
  readonly successor?: { readonly nonce: Nonce; readonly args_digest: string } | undefined;
  readonly successorParamsJson?: string | null | undefined;
  readonly comment?: string | null | undefined;
}

export interface RegisterCommand {
  readonly kind: "register";
  /** Named by the caller, or null: the machine names it (Env.newId). */
  readonly sessionId: string | null;
  readonly agentId: string;
  readonly organizationId: string;
  /** A validated guard config. */
  readonly config: Config;
}

export interface ResetCommand {
  readonly kind: "reset";
  readonly sessionId: string;
  readonly operatorId: string;
}

export interface MarkStaleCommand {
  readonly kind: "mark_stale";
  readonly sessionId: string;
  /** Null: liveness is not judged (a replay: heartbeats are not in the chain). */
  readonly staleAfterNs: number | null;
  readonly heartbeatIntervalMs: number | null;
  readonly missedHeartbeats: number | null;
}

export interface HeartbeatCommand {
  readonly kind: "heartbeat";
  readonly sessionId: string;
}

export type Command =
  | EvaluateCommand
  | ExpireCommand
  | AnswerCommand
  | RegisterCommand
  | ResetCommand
  | MarkStaleCommand
  | HeartbeatCommand;

/** What a transition changes, in the order the caller applies it. */
export type MachineEvent =
  /** A chain entry to sign (the engine) or to find in the chain (the replay). */
  | {
      readonly type: "entry";
      readonly kind: string;
      readonly data: Record<string, unknown>;
      /** The nonce the entry spends (its indexed column), and params stored by digest beside it. */
      readonly spends?: { readonly nonce: Nonce };
      readonly blob?: ParamsBlob;
    }
  | { readonly type: "session"; readonly row: SessionRecord; readonly insert?: boolean }
  /** The session's liveness only (no entry): its last heartbeat. */
  | { readonly type: "touch"; readonly sessionId: string; readonly nowNs: number }
  | { readonly type: "account"; readonly row: BudgetAccount }
  | { readonly type: "ensure_account"; readonly input: EnsureAccountInput }
  | { readonly type: "hold"; readonly row: Reservation }
  | { readonly type: "hitl"; readonly row: HitlRequest; readonly insert?: boolean };

/** A refusal: nothing was decided and nothing is written. */
export interface MachineError {
  readonly code:
    | "session_not_found"
    | "session_exists"
    | "no_pending_request"
    | "already_decided"
    | "hitl_expired"
    | "superseded";
  readonly message: string;
  readonly request?: HitlRequest;
}

export type Outcome<R> =
  | { readonly events: readonly MachineEvent[]; readonly reply: R }
  | { readonly missing: readonly Key[] }
  | { readonly error: MachineError };
