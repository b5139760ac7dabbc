// The engine's public request and result shapes (library mode, spec Model A).
// Plain data; the wire package maps them onto SP/1.0 messages.
import type { ChainFailure, Checkpoint, Signer } from "@leash/chain";
import type {
  Clock,
  Config,
  Nonce,
  Reason,
  Rng,
  SessionStatus,
  State,
  Substrate,
  Verdict,
} from "@leash/core";
import type { EngineReason } from "@leash/machine";
import type { CompiledPolicy } from "@leash/policy";
import type { Tracer } from "@opentelemetry/api";
import type { PolicyRecord } from "./policy-layer.js";
import type { PolicySource } from "./policy-runtime.js";

export interface EngineOptions {
  substrate: Substrate;
  /** Signs every audit chain entry (and so every receipt). See @leash/chain loadSigningKey / generateKeyPair. */
  signer: Signer;
  clock?: Clock;
  rng?: Rng;
  /** How long an ALLOW's budget hold lives without a postExec before recovery releases it. Default 300 s. */
  reservationTtlMs?: number;
  /**
   * The most evaluate calls judged in one transaction: calls that arrive while one batch is being
   * written wait for the next (group commit). Default 64; 1 gives each call its own transaction.
   */
  maxBatch?: number;
  /**
   * How often waitForHitl reads the store for an answer another process wrote (an answer given
   * through this engine resolves at once). Default 500 ms.
   */
  hitlPollMs?: number;
  /** New ids (sessions, HITL requests, modify successors' nonces). Default crypto.randomUUID. */
  newId?: () => string;
  /**
   * Keys trusted to sign the chain from its genesis on (hex or raw bytes). Default: the signer's own
   * key. Without a checkpoint, a chain whose genesis key is not among them is trusted from the last
   * key_rotation that hands over to one of them (history before it is left to `leash verify`).
   */
  trustedKeys?: readonly (string | Uint8Array)[];
  /**
   * Where the last trusted checkpoint lives (@leash/recovery's fileCheckpointStore, as `leash recover`
   * keeps it). The engine verifies the chain from it when it opens the store and refuses a store whose
   * chain is behind or forked from it (a restored older copy); it replaces it as the chain grows (at
   * most every `checkpointIntervalMs`, off the decision path), at a key rotation and at `close()`.
   * Without one, the chain is verified from its genesis at every open and a rollback goes unseen.
   */
  checkpointStore?: CheckpointStore;
  /** At most how often a growing chain's checkpoint is replaced (default 250 ms). */
  checkpointIntervalMs?: number;
  /** Told when replacing the checkpoint fails (it is tried again at the next commit). */
  onCheckpointError?: (error: unknown) => void;
  /** A checkpoint the caller has just verified itself (recover() does): read instead of checkpointStore. */
  trustedCheckpoint?: Checkpoint;
  /**
   * Where the engine's spans go (README: OpenTelemetry). Default: the global provider's tracer named
   * `@leash/engine`, a no-op until the application installs an OpenTelemetry SDK.
   */
  tracer?: Tracer;
  /**
   * An operator's policy (@leash/policy loadPolicy), or a source whose current() may change (a reload):
   * judged after SP/1.0's decide allowed a call, before its budget hold (README: Policies). Its
   * versions are published in the chain and every decision entry names the one it used.
   */
  policy?: CompiledPolicy | PolicySource;
}

/** Keeps one checkpoint, somewhere the store's writers cannot reach (same shape as @leash/recovery's). */
export interface CheckpointStore {
  readonly location: string;
  /** The stored checkpoint, or null when none was ever written; rejects when it is unreadable. */
  read(): Promise<Checkpoint | null>;
  /** Replaces it; once resolved, a crash leaves the old or the new one, whole. */
  write(checkpoint: Checkpoint): Promise<void>;
}

/** What the engine found when it opened its store's chain (see Engine.open). */
export interface ChainOpenReport {
  verified: boolean;
  /** Where verification started: entry 0, the checkpoint's head, or the rotation to a trusted key. */
  trusted_from: "genesis" | "checkpoint" | "key_rotation";
  /** The seq of the first entry read; entries before it are trusted history, not read. */
  from_seq: number;
  /** Entries read (and, but for the trusted first one, verified) by this open. */
  entries_read: number;
  /** Entries in the trusted chain, or verified before the failure. */
  count: number;
  failure: ChainFailure | null;
  duration_ms: number;
}

export interface RegisterRequest {
  agent_id: string;
  organization_id?: string;
  /** Resume or name a session; a new random id when absent. */
  session_id?: string;
  config: Config;
}

/** A request message's identity: its id (unique per sender) and the sender's timestamp. */
export interface EvaluateMessage {
  /** The envelope's message_id: 1 to 128 printable ASCII characters without spaces. */
  id: string;
  /** The envelope's timestamp (ns since the epoch); the store forgets the id some time after it. */
  sent_ns: number;
}

export interface EvaluateRequest {
  session_id: string;
  tool_name: string;
  params?: Record<string, unknown> | null;
  /** Per-dispatch replay token; never derived from the call's content (spec §3.2 rule 3). */
  nonce?: Nonce | null;
  /**
   * The call's estimated cost: a number, or decimal text read exactly (`"0.1"`). Under a budget a
   * call needs one, or a `default_estimate_usd` / `tool_estimates_usd` in its guard config; a
   * missing, negative, NaN or non-numeric estimate is denied (`policy_violation:missing_estimate`,
   * `policy_violation:invalid_estimate`).
   */
  estimated_cost_usd?: number | string | null;
  /**
   * The digest (64 hex) the caller says `params` has (a daemon passes the agent's tool_params_hash).
   * When given and it is not the engine's own canonical digest of `params`, the call is DENY
   * "policy_violation:params_hash_mismatch": the agent and the daemon do not agree on what it runs.
   */
  expected_params_hash?: string;
  /**
   * The error the caller saw in this tool's previous result (an MCP `isError` text, an HTTP 401
   * body). With `error_amplification`, an error signal in it lowers the repeat limit by one, as one
   * in `params` does (spec §3.9); recorded in the decision's entry (at most 1,024 characters).
   */
  previous_error?: string;
  /**
   * The signed request message this call comes from (a daemon fills it from the SP/1.0 envelope).
   * A message is decided once per store: a copy delivered again, to this engine or another one
   * sharing the store, gets the recorded answer (`redelivered: true`), never a second decision.
   * Absent in library mode: every call is then decided.
   */
  message?: EvaluateMessage;
  /** The framework's id for this tool call (AI SDK toolCallId, …): the span's `gen_ai.tool.call.id` (else the nonce). Not recorded in the chain. */
  call_id?: string;
  /** A W3C traceparent (an MCP request's `_meta.traceparent`): the parent of this call's span. Not recorded in the chain. */
  traceparent?: string;
}

/** Reasons the engine gives beyond decide()'s (they are the state machine's: @leash/machine). */
export type { EngineReason };

export interface EvaluateResult {
  session_id: string;
  call_number: number;
  verdict: Verdict;
  reason: Reason | EngineReason;
  /** What the budget chain allows after this call (decimal string), or null when no budget is set. */
  budget_remaining_usd: string | null;
  /** The hold placed for an ALLOW under a budget; settle it with postExec. */
  reservation_id: string | null;
  /** The estimate judged against the budget (the call's own or its config's default), exact; null without one. */
  estimate_usd: string | null;
  /** The random number probabilistic denial used, when it was consulted (recorded for audit). */
  rng: number | null;
  params_hash: string | null;
  /** The consecutive identical calls of this tool before this one, as rule 6 counted them (§4.3). */
  repeat_count: number;
  /**
   * The decision's audit chain entry: its position and hash. Null only for a refusal without an
   * entry (`fail_closed:chain_unverified`, whose `call_number` is then 0: no call was counted).
   */
  entry_seq: number | null;
  entry_hash: string | null;
  /** A compact JWS (EdDSA) of the entry, verifiable offline with the public key (@leash/receipts). */
  receipt: string | null;
  /** With `fail_closed:chain_unverified`: where the chain fails (index and kind, as `leash verify` says). */
  chain_failure?: ChainFailure;
  /** With `fail_closed:state_unverified`: the row the chain does not vouch for (its table and key). */
  state_failure?: { table: string; key: string };
  /** With `fail_closed:chain_unverified` or `fail_closed:state_unverified`: the one-line explanation. */
  error?: string;
  /** With HITL: the request a human answers (engine.getHitl / answerHitl / waitForHitl take it). */
  hitl_request_id?: string;
  /** With a policy (EngineOptions.policy): the version in force, and what it judged (null: it did not run). */
  policy_hash?: string;
  policy?: PolicyRecord | null;
  /** True when the request's message was decided before: this is that recorded answer, nothing new was written. */
  redelivered?: true;
}

export interface PostExecRequest {
  session_id: string;
  call_number: number;
  actual_cost_usd: number | string;
  success?: boolean;
  /** With `success: false`: what went wrong, recorded in the post_exec entry (at most 1,024 characters). */
  error_message?: string;
  /** A retried postExec with the same key is a no-op. Default: derived from session and call number. */
  idempotency_key?: string;
  /** The span's `gen_ai.tool.call.id` (as in evaluate); not recorded in the chain. */
  call_id?: string;
  /** A W3C traceparent: the parent of this settlement's span; not recorded in the chain. */
  traceparent?: string;
}

export interface PostExecResult {
  session_id: string;
  call_number: number;
  actual_usd: string;
  overrun_usd: string;
  budget_remaining_usd: string | null;
  replayed: boolean;
  /** Reported at or after the hold's expiry: still spent (real money was), and recorded as late. */
  late: boolean;
}

export interface SessionView {
  session_id: string;
  agent_id: string;
  organization_id: string;
  status: SessionStatus;
  config: Config;
  state: State;
  call_count: number;
  budget_remaining_usd: string | null;
}

export type HumanDecision = "approve" | "reject" | "modify" | "defer" | "escalate";

export interface ResumeRequest {
  session_id: string;
  /** One of the five, compared trimmed and lowercased; anything else is refused and records nothing. */
  decision: HumanDecision;
  operator_id: string;
  /** For `modify`: the edited call the human allows instead (nonce + its canonical args digest). */
  successor?: { nonce: Nonce; args_digest: string };
  /**
   * The request the human answers (the session's `state.pending_request.request_id`). Given, the
   * answer lands on that request or nowhere; absent, on the session's open request.
   */
  request_id?: string;
  /** A W3C traceparent: the parent of this decision's span; not recorded in the chain. */
  traceparent?: string;
}

/** A HITL request as an operator sees it (engine.getHitl / listHitl). */
export type HitlStatus = "pending" | "decided" | "consumed" | "expired";

export interface HitlRequestView {
  request_id: string;
  session_id: string;
  call_number: number;
  tool_name: string;
  nonce: Nonce | null;
  status: HitlStatus;
  /** Why the call paused (a decide() reason such as `hitl_all_calls`). */
  reason: Reason;
  /** The paused call's params (parsed from `params_json`); null for requests stored before they were kept. */
  params: Record<string, unknown> | null;
  /** The params as canonical JSON, exactly what `args_digest` is the SHA-256 of. */
  params_json: string | null;
  args_digest: string | null;
  /** The session's budget when the call paused (exact decimal text); null without a budget. */
  budget: { spent_usd: string | null; limit_usd: string | null; remaining_usd: string | null } | null;
  /** The guard config's identity: its canonical hash. */
  policy_id: string | null;
  created_ns: number;
  /** Null only for requests stored before expiry existed: those never expire. */
  expires_ns: number | null;
  decided_ns: number | null;
  decision: HumanDecision | null;
  /** Who answered ("system:timeout" for an expiry). */
  operator_id: string | null;
  comment: string | null;
  /** For modify: the call the operator allows instead. */
  successor: { nonce: Nonce; args_digest: string; params: Record<string, unknown> | null } | null;
}

export interface HitlListFilter {
  sessionId?: string;
  status?: HitlStatus;
  /**
   * false: a plain read that records nothing (so an engine without a signing key can list); requests
   * past their expiry are then listed as stored (`pending`). Default true: they are expired first.
   */
  recordExpiry?: boolean;
}

export interface HitlAnswer {
  decision: HumanDecision;
  operatorId: string;
  comment?: string;
  /** For modify (required there, refused elsewhere): the params the operator allows instead. */
  params?: Record<string, unknown>;
  /**
   * For modify: the successor's nonce, when the caller must choose it (the daemon's wire carries
   * nonces as uint64, so it names a decimal one). Default: a fresh id from EngineOptions.newId.
   */
  successorNonce?: Nonce;
}

export interface HitlEvent {
  type: "hitl_request" | "hitl_decided" | "hitl_expired";
  request: HitlRequestView;
}

export interface WaitForHitlOptions {
  /** Aborting rejects the wait with the signal's reason; nothing is recorded. */
  signal?: AbortSignal;
  /** Give up waiting after this long and resolve with the request as it is then (still pending). */
  timeoutMs?: number;
}
