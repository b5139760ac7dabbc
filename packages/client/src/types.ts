// The client's public request and result shapes: the engine's names (session_id, tool_name, …) so a
// guarded tool moves from library mode to the daemon unchanged. Plain data; no I/O here.
import type { GuardConfig, HitlRequestView, SessionState } from "@leash/wire";

/** PEM text or bytes for TLS: `ca` (default: the system's roots), and `cert` + `key` for mTLS. */
export interface GrpcTlsOptions {
  ca?: string | Uint8Array;
  cert?: string | Uint8Array;
  key?: string | Uint8Array;
}

/** The daemon's gRPC address (`leash serve --grpc`). */
export interface GrpcTarget {
  /** "host:port" (or "[v6]:port"). */
  address: string;
  /** TLS options (default: TLS with the system's roots); `false`: plaintext, loopback addresses only. */
  tls?: GrpcTlsOptions | false;
  /** The name the server's certificate must carry, when it is not the address's host. */
  serverName?: string;
  /**
   * HTTP/2 keepalive while a call is open: a ping after `timeMs` without traffic, and the connection
   * (with its calls: a following tail, a WaitHitl) fails as daemon_unavailable when no ack comes within
   * `timeoutMs`. Default 20 000 / 10 000 ms; `false` turns it off (a hung daemon host then holds a
   * stream until its deadline, or forever for a following tail).
   */
  keepalive?: { timeMs?: number; timeoutMs?: number } | false;
}

/**
 * One transport: `socketPath` (SP/1.0 envelopes, HMAC'd with `hmacKey`) or `grpc` (the ShackleDaemon
 * service; TLS or mTLS authenticates, no HMAC).
 */
export interface ClientOptions {
  /** The daemon's Unix socket. */
  socketPath?: string;
  /** The daemon's gRPC service, instead of the socket. */
  grpc?: GrpcTarget;
  organizationId: string;
  agentId: string;
  /** Socket only: the organization's HMAC key, raw bytes or hex, at least 32 bytes. */
  hmacKey?: Uint8Array | string;
  /** Socket only: which of the organization's keys `hmacKey` is (Envelope.key_id). */
  keyId?: string;
  /** The daemon's Ed25519 public key (64 hex): when given, every verdict's receipt is verified. */
  daemonPublicKey?: string;
  /** How long a pre_exec waits for its verdict before failing closed. Default 50 ms. */
  timeoutMs?: number;
  /** How long register, post_exec, heartbeat and get_session wait. Default 1000 ms. */
  controlTimeoutMs?: number;
  /** Heartbeat period after register (§4.5); 0 turns the loop off. Default 30 000 ms. */
  heartbeatIntervalMs?: number;
  /** Reconnect backoff: first delay and cap, doubled per failed attempt, with jitter. */
  reconnect?: { initialDelayMs?: number; maxDelayMs?: number };
  /** RegisterRequest.framework and agent_version, for the daemon's records. */
  framework?: string;
  agentVersion?: string;
  /**
   * Told of failures nobody awaits: a heartbeat of the background loop (it keeps going), a post_exec
   * the daemon refused after it was sent. Default: ignored.
   */
  onBackgroundError?: (error: unknown) => void;
}

export interface ClientRegisterRequest {
  /** Resume this session instead of starting a new one. */
  session_id?: string;
  framework?: string;
  metadata?: Record<string, string>;
}

export interface RegisterResult {
  session_id: string;
  daemon_version: string;
  negotiated_protocol: string;
  /** The policy the daemon applies (from its configuration, never from the agent). */
  active_config: GuardConfig | undefined;
  daemon_time_ns: bigint;
}

export interface PreExecCall {
  /** Default: the session of the last register(). */
  session_id?: string;
  tool_name: string;
  /** The arguments: an object (serialized), or JSON text (sent as given). Default {}. */
  params?: Record<string, unknown> | string | null;
  /** A number or an exact decimal string. Default 0. */
  estimated_cost_usd?: number | string;
  /** Per-dispatch replay token (a safe integer ≥ 1 or a decimal string of a uint64). Default random. */
  nonce?: string | number | bigint;
}

/**
 * Why the client itself answered DENY without a daemon verdict (README "Fail closed"):
 * no connection, no answer in time, an answer it cannot trust, a receipt that does not verify or
 * bind this call, an SP/1.0 Error instead of a verdict, a call it could not send.
 */
export type FailClosedReason =
  | "fail_closed:daemon_unavailable"
  | "fail_closed:timeout"
  | "fail_closed:bad_response"
  /** The daemon refused our HMAC key or key id (a wrong key, or a key id its config does not have). */
  | "fail_closed:auth_failed"
  | "fail_closed:bad_receipt"
  | "fail_closed:daemon_error"
  | "fail_closed:bad_request";

export interface PreExecResult {
  session_id: string;
  /** The daemon's call number (0 when the client failed closed before the daemon answered). */
  call_number: number;
  verdict: "ALLOW" | "DENY" | "HITL";
  /** The exact §3.5 (or extension) reason, or a FailClosedReason. */
  reason: string;
  /** Exact decimal string, or null when no budget is set (or the client failed closed). */
  budget_remaining_usd: string | null;
  /** Hex SHA-256 of the canonical params, or null when they have no canonical form. */
  params_hash: string | null;
  entry_seq: number | null;
  entry_hash: string | null;
  /** The compact JWS of the decision's chain entry; null when the client failed closed. */
  receipt: string | null;
  /** True when the client decided (DENY) itself; `detail` then says why. */
  fail_closed: boolean;
  detail?: string;
  /** With HITL: the request a human answers (wait for it with waitForHitl), else null. */
  hitl_request_id?: string | null;
  /** With HITL: when that request expires (daemon clock, ns since the epoch), else null. */
  hitl_expires_ns?: bigint | null;
}

/**
 * How a HITL request ended for the waiting agent. `decided`: a human answered (re-dispatch to have
 * the daemon judge the call: same nonce, or the successor's for modify). `expired`: nobody answered in
 * time (DENY hitl_timeout). `fail_closed`: the client could not learn the answer (DENY).
 */
export interface HitlOutcome {
  kind: "decided" | "expired" | "fail_closed";
  request_id: string;
  session_id: string;
  call_number: number;
  decision: "approve" | "reject" | "modify" | "defer" | "escalate" | null;
  /** The console token's identity of whoever answered. */
  operator_id: string | null;
  comment: string;
  /** `hitl_transition:<decision>`, `hitl_timeout`, or a FailClosedReason. */
  reason: string;
  detail?: string;
  /** With modify: the call the operator allows instead. */
  successor?: { nonce: string; params_json: string };
  /** The daemon's view of the request (null when the client failed closed). */
  view: HitlRequestView | null;
}

export interface PostExecSettlement {
  /** Default: the session of the last register(). */
  session_id?: string;
  call_number: number;
  /** A number or an exact decimal string. */
  actual_cost_usd: number | string;
  success?: boolean;
  error_message?: string;
  duration_ms?: number;
  /** A retried postExec with the same key is a no-op. Default: derived by the daemon. */
  idempotency_key?: string;
}

export interface HeartbeatResult {
  session_id: string;
  /** The daemon's view of the budget (exact decimal), or null when none is set. */
  daemon_budget_remaining_usd: string | null;
  drift_detected: boolean;
  daemon_time_ns: bigint;
}

export type { SessionState };

/** What client.tail() reads (`leash tail --daemon`); every field is optional. */
export interface TailOptions {
  /**
   * Resume after this chain seq (the last entry you saw), -1 for the chain's first entry. Default: from
   * the first entry, unless `last` is given.
   */
  afterSeq?: number;
  /** Start with the latest `last` matching entries instead (ignored with afterSeq). */
  last?: number;
  /** Only this session's entries (it must be your organization's). */
  sessionId?: string;
  /** Only these entry kinds ("decision", "post_exec", "hitl_request", …). Default: every kind. */
  kinds?: readonly string[];
  /** Keep going: wait for new entries until `signal` aborts (or the daemon goes away: an error). */
  follow?: boolean;
  /** Stop after this many entries. */
  limit?: number;
  /** Ends the iteration quietly. */
  signal?: AbortSignal;
}

/**
 * One audit chain entry of your organization, as the daemon summarizes it (not a signed record:
 * `leash verify` and the receipts are). Fields the entry does not record are null.
 */
export interface TailEntry {
  seq: number;
  entry_hash: string;
  entry_id: string;
  /** The daemon's clock when it wrote the entry, ns since the Unix epoch. */
  time_ns: bigint;
  kind: string;
  session_id: string;
  agent_id: string | null;
  call_number: number | null;
  /** Null on a decision about a malformed call (and on kinds that name no tool). */
  tool_name: string | null;
  /** Decisions only. */
  verdict: "ALLOW" | "DENY" | "HITL" | null;
  reason: string | null;
  /** Exact decimal, when the session has a budget. */
  budget_after_usd: string | null;
}
