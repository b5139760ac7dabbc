// Converts port records to SQLite rows and back: JSON TEXT, decimal TEXT, tagged nonces, checked integers.
// It runs no SQL; stores.ts binds these rows to prepared statements.

import type {
  BudgetAccount,
  ChainEntryRecord,
  HitlRequest,
  HitlRequestStatus,
  Nonce,
  OutboxItem,
  OutboxStatus,
  Reason,
  Reservation,
  ReservationStatus,
  SessionRecord,
} from "@leash/core";
import { SubstrateError } from "@leash/core";

/**
 * Below 2^63 every integral JS number fits an INTEGER column exactly and reads back as the same
 * number: above 2^53 doubles are spaced wider than 1, but each is still an integer (epoch
 * nanoseconds, ~1.8e18, live there).
 */
const MAX_INT64 = 2 ** 63;

export function checkedInteger(field: string, value: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || Math.abs(value) >= MAX_INT64) {
    // An INTEGER column would refuse (STRICT) or round this; say which field instead of a datatype error.
    throw new RangeError(`${field} must be an integer within ±2^63, got ${String(value)}`);
  }
  return value;
}

function optionalInteger(field: string, value: number | null | undefined): number | null {
  return value === null || value === undefined ? null : checkedInteger(field, value);
}

export function text(field: string, value: string): string {
  if (typeof value !== "string") throw new TypeError(`${field} must be a string, got ${typeof value}`);
  return value;
}

export function optionalText(field: string, value: string | null | undefined): string | null {
  return value === null || value === undefined ? null : text(field, value);
}

function json(field: string, value: unknown): string {
  const encoded = JSON.stringify(value);
  if (encoded === undefined) throw new TypeError(`${field} is not JSON-serializable`);
  return encoded;
}

function parseJson<T>(table: string, field: string, encoded: string): T {
  try {
    return JSON.parse(encoded) as T;
  } catch (error) {
    throw new SubstrateError("corrupt", `${table}.${field} holds invalid JSON`, { cause: error });
  }
}

/** Nonce key: the type is part of the text, so the number 7 ("n:7") and the string "7" ("s:7") differ. */
export function encodeNonce(nonce: Nonce): string {
  if (typeof nonce === "string") return `s:${nonce}`;
  if (typeof nonce === "number") return `n:${String(nonce)}`;
  throw new TypeError(`a nonce must be a string or a number, got ${typeof nonce}`);
}

export function decodeNonce(encoded: string): Nonce {
  if (encoded.startsWith("s:")) return encoded.slice(2);
  // String(number) round-trips through Number() exactly (shortest round-trip form).
  if (encoded.startsWith("n:")) return Number(encoded.slice(2));
  throw new SubstrateError("corrupt", `unrecognized nonce encoding ${JSON.stringify(encoded)}`);
}

function encodeOptionalNonce(field: string, nonce: Nonce | null | undefined): string | null {
  if (nonce === null || nonce === undefined) return null;
  try {
    return encodeNonce(nonce);
  } catch (error) {
    throw new TypeError(`${field}: ${(error as Error).message}`);
  }
}

// ---- sessions -------------------------------------------------------------------------------

export interface SessionRow {
  session_id: string;
  agent_id: string;
  organization_id: string;
  status: string;
  config: string;
  state: string;
  call_count: number;
  created_ns: number;
  updated_ns: number;
  last_heartbeat_ns: number | null;
  at_seq: number | null;
}

export function sessionToRow(r: SessionRecord): SessionRow {
  return {
    session_id: text("session_id", r.session_id),
    agent_id: text("agent_id", r.agent_id),
    organization_id: text("organization_id", r.organization_id),
    status: text("status", r.status),
    config: json("config", r.config),
    state: json("state", r.state),
    call_count: checkedInteger("call_count", r.call_count),
    created_ns: checkedInteger("created_ns", r.created_ns),
    updated_ns: checkedInteger("updated_ns", r.updated_ns),
    last_heartbeat_ns: optionalInteger("last_heartbeat_ns", r.last_heartbeat_ns),
    at_seq: optionalInteger("at_seq", r.at_seq),
  };
}

export function rowToSession(row: SessionRow): SessionRecord {
  return {
    session_id: row.session_id,
    agent_id: row.agent_id,
    organization_id: row.organization_id,
    status: row.status as SessionRecord["status"],
    config: parseJson("leash_sessions", "config", row.config),
    state: parseJson("leash_sessions", "state", row.state),
    call_count: row.call_count,
    created_ns: row.created_ns,
    updated_ns: row.updated_ns,
    last_heartbeat_ns: row.last_heartbeat_ns,
    at_seq: row.at_seq,
  };
}

// ---- budget accounts ------------------------------------------------------------------------

export interface AccountRow {
  account_id: string;
  scope: string;
  parent_id: string | null;
  limit_usd: string;
  spent_usd: string;
  reserved_usd: string;
  created_ns: number;
  updated_ns: number;
  at_seq: number | null;
}

export function accountToRow(a: BudgetAccount): AccountRow {
  return {
    account_id: text("account_id", a.account_id),
    scope: text("scope", a.scope),
    parent_id: optionalText("parent_id", a.parent_id),
    limit_usd: text("limit_usd", a.limit_usd),
    spent_usd: text("spent_usd", a.spent_usd),
    reserved_usd: text("reserved_usd", a.reserved_usd),
    created_ns: checkedInteger("created_ns", a.created_ns),
    updated_ns: checkedInteger("updated_ns", a.updated_ns),
    at_seq: optionalInteger("at_seq", a.at_seq),
  };
}

export function rowToAccount(row: AccountRow): BudgetAccount {
  return {
    account_id: row.account_id,
    scope: row.scope as BudgetAccount["scope"],
    parent_id: row.parent_id,
    limit_usd: row.limit_usd,
    spent_usd: row.spent_usd,
    reserved_usd: row.reserved_usd,
    created_ns: row.created_ns,
    updated_ns: row.updated_ns,
    at_seq: row.at_seq,
  };
}

// ---- reservations ---------------------------------------------------------------------------

export interface ReservationRow {
  reservation_id: string;
  account_ids: string;
  session_id: string;
  call_number: number;
  amount_usd: string;
  actual_usd: string | null;
  status: string;
  idempotency_key: string | null;
  created_ns: number;
  expires_ns: number;
  resolved_ns: number | null;
  at_seq: number | null;
}

export function reservationToRow(r: Reservation): ReservationRow {
  if (!Array.isArray(r.account_ids) || r.account_ids.some((id) => typeof id !== "string")) {
    throw new TypeError("account_ids must be an array of strings");
  }
  return {
    reservation_id: text("reservation_id", r.reservation_id),
    account_ids: JSON.stringify(r.account_ids),
    session_id: text("session_id", r.session_id),
    call_number: checkedInteger("call_number", r.call_number),
    amount_usd: text("amount_usd", r.amount_usd),
    actual_usd: optionalText("actual_usd", r.actual_usd),
    status: text("status", r.status),
    idempotency_key: optionalText("idempotency_key", r.idempotency_key),
    created_ns: checkedInteger("created_ns", r.created_ns),
    expires_ns: checkedInteger("expires_ns", r.expires_ns),
    resolved_ns: optionalInteger("resolved_ns", r.resolved_ns),
    at_seq: optionalInteger("at_seq", r.at_seq ?? null),
  };
}

export function rowToReservation(row: ReservationRow): Reservation {
  return {
    reservation_id: row.reservation_id,
    account_ids: parseJson("leash_reservations", "account_ids", row.account_ids),
    session_id: row.session_id,
    call_number: row.call_number,
    amount_usd: row.amount_usd,
    actual_usd: row.actual_usd,
    status: row.status as ReservationStatus,
    idempotency_key: row.idempotency_key,
    created_ns: row.created_ns,
    expires_ns: row.expires_ns,
    resolved_ns: row.resolved_ns,
    // Absent, not null, for rows without a stamp: a record written without one reads back equal.
    ...(row.at_seq === null || row.at_seq === undefined ? {} : { at_seq: row.at_seq }),
  };
}

// ---- HITL requests --------------------------------------------------------------------------

export interface HitlRow {
  request_id: string;
  session_id: string;
  call_number: number;
  tool_name: string;
  nonce: string | null;
  args_digest: string | null;
  reason: string;
  status: string;
  decision: string | null;
  operator_id: string | null;
  successor_nonce: string | null;
  successor_args_digest: string | null;
  created_ns: number;
  decided_ns: number | null;
  params_json: string | null;
  budget_spent_usd: string | null;
  budget_limit_usd: string | null;
  budget_remaining_usd: string | null;
  policy_id: string | null;
  expires_ns: number | null;
  comment: string | null;
  successor_params_json: string | null;
  at_seq: number | null;
}

export function hitlToRow(h: HitlRequest): HitlRow {
  return {
    request_id: text("request_id", h.request_id),
    session_id: text("session_id", h.session_id),
    call_number: checkedInteger("call_number", h.call_number),
    tool_name: text("tool_name", h.tool_name),
    nonce: encodeOptionalNonce("nonce", h.nonce),
    args_digest: optionalText("args_digest", h.args_digest),
    reason: text("reason", h.reason),
    status: text("status", h.status),
    decision: optionalText("decision", h.decision),
    operator_id: optionalText("operator_id", h.operator_id),
    successor_nonce: encodeOptionalNonce("successor_nonce", h.successor_nonce),
    successor_args_digest: optionalText("successor_args_digest", h.successor_args_digest),
    created_ns: checkedInteger("created_ns", h.created_ns),
    decided_ns: optionalInteger("decided_ns", h.decided_ns),
    params_json: optionalText("params_json", h.params_json),
    budget_spent_usd: optionalText("budget_spent_usd", h.budget_spent_usd),
    budget_limit_usd: optionalText("budget_limit_usd", h.budget_limit_usd),
    budget_remaining_usd: optionalText("budget_remaining_usd", h.budget_remaining_usd),
    policy_id: optionalText("policy_id", h.policy_id),
    expires_ns: optionalInteger("expires_ns", h.expires_ns),
    comment: optionalText("comment", h.comment),
    successor_params_json: optionalText("successor_params_json", h.successor_params_json),
    at_seq: optionalInteger("at_seq", h.at_seq ?? null),
  };
}

export function rowToHitl(row: HitlRow): HitlRequest {
  return {
    request_id: row.request_id,
    session_id: row.session_id,
    call_number: row.call_number,
    tool_name: row.tool_name,
    nonce: row.nonce === null ? null : decodeNonce(row.nonce),
    args_digest: row.args_digest,
    reason: row.reason as Reason,
    status: row.status as HitlRequestStatus,
    decision: row.decision,
    operator_id: row.operator_id,
    successor_nonce: row.successor_nonce === null ? null : decodeNonce(row.successor_nonce),
    successor_args_digest: row.successor_args_digest,
    created_ns: row.created_ns,
    decided_ns: row.decided_ns,
    params_json: row.params_json,
    budget_spent_usd: row.budget_spent_usd,
    budget_limit_usd: row.budget_limit_usd,
    budget_remaining_usd: row.budget_remaining_usd,
    policy_id: row.policy_id,
    expires_ns: row.expires_ns,
    comment: row.comment,
    successor_params_json: row.successor_params_json,
    ...(row.at_seq === null || row.at_seq === undefined ? {} : { at_seq: row.at_seq }),
  };
}

// ---- chain entries --------------------------------------------------------------------------

export interface ChainRow {
  seq: number;
  entry_id: string;
  entry_hash: string;
  prev_hash: string;
  body: string;
  signature: string;
  key_id: string;
  kind: string;
  session_id: string | null;
  created_ns: number;
  /** Type-tagged as encodeNonce; null for an entry that spends none. */
  nonce: string | null;
}

/** A lone surrogate: high without low, or low without high. No `u` flag, so it sees UTF-16 code units. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * The body is hashed, so it must come back byte for byte. SQLite stores UTF-8, into which a lone
 * surrogate goes as U+FFFD; U+0000 would survive here but not in PostgreSQL. Both are refused in
 * every substrate alike (canonical JSON never holds either raw), rather than kept by some.
 */
function body(value: string): string {
  text("body", value);
  if (LONE_SURROGATE.test(value) || value.includes("\u0000")) {
    throw new TypeError("body must be well-formed Unicode text without U+0000");
  }
  return value;
}

export function chainToRow(e: ChainEntryRecord): ChainRow {
  return {
    seq: checkedInteger("seq", e.seq),
    entry_id: text("entry_id", e.entry_id),
    entry_hash: text("entry_hash", e.entry_hash),
    prev_hash: text("prev_hash", e.prev_hash),
    body: body(e.body),
    signature: text("signature", e.signature),
    key_id: text("key_id", e.key_id),
    kind: text("kind", e.kind),
    session_id: optionalText("session_id", e.session_id),
    created_ns: checkedInteger("created_ns", e.created_ns),
    nonce: chainNonce(e),
  };
}

/** The entry's nonce column; a nonce needs the session it is spent for. */
function chainNonce(e: ChainEntryRecord): string | null {
  const nonce = encodeOptionalNonce("nonce", e.nonce);
  if (nonce !== null && (e.session_id === null || e.session_id === undefined)) {
    throw new TypeError("a chain entry with a nonce needs a session_id");
  }
  return nonce;
}

/** Rows already have the record's shape; copying keeps a statement's row object out of callers' hands. */
export function rowToChain(row: ChainRow): ChainEntryRecord {
  return {
    seq: row.seq,
    entry_id: row.entry_id,
    entry_hash: row.entry_hash,
    prev_hash: row.prev_hash,
    body: row.body,
    signature: row.signature,
    key_id: row.key_id,
    kind: row.kind,
    session_id: row.session_id,
    created_ns: row.created_ns,
    // Only an entry that spends one has the field, so an entry reads back as it was appended.
    ...(row.nonce === null || row.nonce === undefined ? {} : { nonce: decodeNonce(row.nonce) }),
  };
}

// ---- outbox ---------------------------------------------------------------------------------

export interface OutboxRow {
  seq: number;
  entry_id: string;
  session_id: string | null;
  status: string;
  attempts: number;
  claimed_by: string | null;
  lease_until_ns: number | null;
  last_error: string | null;
  created_ns: number;
}

export function rowToOutbox(row: OutboxRow): OutboxItem {
  return {
    seq: row.seq,
    entry_id: row.entry_id,
    session_id: row.session_id,
    status: row.status as OutboxStatus,
    attempts: row.attempts,
    claimed_by: row.claimed_by,
    lease_until_ns: row.lease_until_ns,
    last_error: row.last_error,
    created_ns: row.created_ns,
  };
}
