// How port values become column values and back: nonces, nanosecond integers, decimals, JSON, names.
// No SQL runs here; the stores call these on every parameter and every row.
import type { DecimalString, Nonce } from "@leash/core";
import { SubstrateError } from "@leash/core";

/** Schema-qualified (or bare, when no schema is given) table names, quoted for SQL. */
export interface TableNames {
  /** The schema's quoted name, or null to use the connection's search_path. */
  readonly schema: string | null;
  /** The text the migration lock is keyed on, so processes migrating one schema queue up. */
  readonly lockKey: string;
  /** Prefix of the per-row key locks (sql.ts keys.lock), so schemas sharing a database never share keys. */
  readonly rowKeyPrefix: string;
  /** The text the batch lock is keyed on (see substrate.ts): shared by solo transactions, exclusive to batches. */
  readonly batchKey: string;
  readonly version: string;
  readonly sessions: string;
  readonly nonces: string;
  readonly accounts: string;
  readonly reservations: string;
  readonly hitl: string;
  readonly chain: string;
  /** One row (id 1) holding the newest entry's seq and hash: the lock every appender queues on. */
  readonly chainHead: string;
  /** Params texts by digest (ChainEntryRecord.params), each kept once. */
  readonly params: string;
  readonly outbox: string;
  readonly messages: string;
  /** Escrow allotments of shared budget accounts (migration 12). */
  readonly allotments: string;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]*$/;

export function tableNames(schema: string | undefined): TableNames {
  if (schema !== undefined && (!IDENTIFIER.test(schema) || schema.length > 63)) {
    // Checked rather than escaped: the name also keys the migration lock and appears in messages.
    throw new TypeError(
      `schema must be a plain identifier of at most 63 bytes, got ${JSON.stringify(schema)}`,
    );
  }
  const quoted = schema === undefined ? null : `"${schema}"`;
  const table = (name: string) => (quoted === null ? name : `${quoted}.${name}`);
  return {
    schema: quoted,
    lockKey: `leash.migrate:${schema ?? ""}`,
    rowKeyPrefix: `leash.row:${schema ?? ""}:`,
    batchKey: `leash.batch:${schema ?? ""}`,
    version: table("leash_schema_version"),
    sessions: table("leash_sessions"),
    nonces: table("leash_nonces"),
    accounts: table("leash_budget_accounts"),
    reservations: table("leash_reservations"),
    hitl: table("leash_hitl_requests"),
    chain: table("leash_chain"),
    chainHead: table("leash_chain_head"),
    params: table("leash_params"),
    outbox: table("leash_outbox"),
    messages: table("leash_messages"),
    allotments: table("leash_budget_allotments"),
  };
}

function invalid(message: string): SubstrateError {
  return new SubstrateError("corrupt", message);
}

/**
 * A nonce as its JSON text: the string "7" is stored as `"7"` and the number 7 as `7`, so the
 * quotes are the type tag. JSON's escapes also keep U+0000 and lone surrogates, which a text
 * column would reject or silently replace, distinct.
 */
export function encodeNonce(nonce: Nonce): string {
  if (typeof nonce === "string") return JSON.stringify(nonce);
  if (typeof nonce === "number") return Number.isFinite(nonce) ? JSON.stringify(nonce) : String(nonce);
  throw invalid(`a nonce must be a string or a number, got ${typeof nonce}`);
}

export function decodeNonce(text: string): Nonce {
  if (text.startsWith('"')) return JSON.parse(text) as string;
  const value = Number(text);
  if (Number.isNaN(value) && text !== "NaN")
    throw invalid(`stored nonce ${JSON.stringify(text)} is unreadable`);
  return value;
}

export function encodeOptionalNonce(nonce: Nonce | null | undefined): string | null {
  return nonce === null || nonce === undefined ? null : encodeNonce(nonce);
}

export function decodeOptionalNonce(text: string | null): Nonce | null {
  return text === null ? null : decodeNonce(text);
}

const INT64_LIMIT = 2 ** 63;

/**
 * Nanosecond timestamps and counters live in BIGINT. A real epoch-nanosecond clock (~1.8e18) is
 * beyond 2^53, where only some integers are doubles; each such double is written as its exact
 * integer value (BigInt, not String, which would print a shorter neighbour), so it reads back as
 * the same double and compares correctly in SQL.
 */
export function encodeInt(value: number, field: string): string {
  if (typeof value !== "number" || !Number.isInteger(value) || value >= INT64_LIMIT || value < -INT64_LIMIT) {
    throw invalid(`${field} must be an integer that fits a BIGINT, got ${String(value)}`);
  }
  return Number.isSafeInteger(value) ? String(value) : BigInt(value).toString();
}

export function encodeOptionalInt(value: number | null | undefined, field: string): string | null {
  return value === null || value === undefined ? null : encodeInt(value, field);
}

/**
 * pg returns BIGINT as a string (or a number when a caller's pool overrides the parser). Values
 * written from a number come back as that number; others beyond 2^53 round to the nearest double.
 */
export function decodeInt(value: unknown, field: string): number {
  const n = typeof value === "number" ? value : typeof value === "string" ? Number(value) : Number.NaN;
  if (!Number.isInteger(n)) throw invalid(`stored ${field} ${String(value)} is not an integer`);
  return n;
}

export function decodeOptionalInt(value: unknown, field: string): number | null {
  return value === null || value === undefined ? null : decodeInt(value, field);
}

// What PostgreSQL's numeric input accepts, minus NaN and Infinity: money is always a finite number.
const DECIMAL = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

/**
 * Decimal strings are stored verbatim (a TEXT column, with a generated NUMERIC beside it for SQL),
 * because NUMERIC alone would turn "1e-7" into "0.0000001" and "+1" into "1".
 */
export function encodeDecimal(value: DecimalString, field: string): string {
  if (typeof value !== "string" || !DECIMAL.test(value)) {
    throw invalid(`${field} must be a decimal string, got ${JSON.stringify(value)}`);
  }
  return value;
}

export function encodeOptionalDecimal(value: DecimalString | null | undefined, field: string): string | null {
  return value === null || value === undefined ? null : encodeDecimal(value, field);
}

/** JSON goes in as text cast to JSONB, so pg's own array-literal conversion never touches it. */
export function encodeJson(value: unknown, field: string): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw new SubstrateError("corrupt", `${field} cannot be written as JSON`, { cause: error });
  }
  if (text === undefined) throw invalid(`${field} cannot be written as JSON`);
  return text;
}

export function encodeText(value: string, field: string): string {
  if (typeof value !== "string") throw invalid(`${field} must be a string, got ${typeof value}`);
  return value;
}

/** A lone surrogate: high without low, or low without high. No `u` flag, so it sees UTF-16 code units. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * A chain entry's body is hashed, so it must come back byte for byte: PostgreSQL text refuses U+0000
 * (after the statement has aborted the transaction) and pg sends a lone surrogate as U+FFFD. Both are
 * refused here, before the server sees them, and alike in every substrate (canonical JSON holds neither raw).
 */
export function encodeBody(value: string, field: string): string {
  encodeText(value, field);
  if (LONE_SURROGATE.test(value) || value.includes("\u0000")) {
    throw invalid(`${field} must be well-formed Unicode text without U+0000`);
  }
  return value;
}

export function encodeOptionalText(value: string | null | undefined, field: string): string | null {
  return value === null || value === undefined ? null : encodeText(value, field);
}

/** LIMIT values: a non-negative integer, or null for no limit. */
export function encodeLimit(limit: number | undefined): string | null {
  if (limit === undefined) return null;
  if (!Number.isInteger(limit) || limit < 0)
    throw new RangeError(`limit must be a non-negative integer, got ${limit}`);
  return String(limit);
}
