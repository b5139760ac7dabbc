// The digests by which a chain entry commits to the store rows it changes (`data.row_digests`), and the
// check of that field's shape. Pure but for SHA-256; it reads no store and decides nothing.
//
// A row's digest is SHA-256 over the canonical JSON of `{table, row}`, the row without `at_seq` (the
// stamp naming the entry that carries the digest) and, for sessions, without `last_heartbeat_ns`
// (liveness, written without an entry). Integers beyond 2^53 (epoch nanoseconds) are hashed as their
// decimal digits, undefined fields as absent: what every store returns for what was written.
import { createHash } from "node:crypto";
import { canonicalJson } from "@leash/core";

/** The data field every entry kind may carry: `"<table>:<key>"` → row digest (hex SHA-256). */
export const ROW_DIGESTS_FIELD = "row_digests";

/** The tables whose rows the chain authenticates (the names `leash recover` reports them by). */
export type StateTable = "sessions" | "budget_accounts" | "reservations" | "hitl_requests";

export const STATE_TABLES: readonly StateTable[] = [
  "sessions",
  "budget_accounts",
  "reservations",
  "hitl_requests",
];

/** Fields of a row that no digest covers: the stamp itself, and a session's heartbeat. */
const UNCOVERED: Readonly<Record<StateTable, readonly string[]>> = {
  sessions: ["at_seq", "last_heartbeat_ns"],
  budget_accounts: ["at_seq"],
  reservations: ["at_seq"],
  hitl_requests: ["at_seq"],
};

/** The key of a row in `row_digests`: the table, a colon, the row's id (ids may hold colons; tables do not). */
export function rowKey(table: StateTable, id: string): string {
  return `${table}:${id}`;
}

/** The table and id a `row_digests` key names, or null for a key of no state table. */
export function parseRowKey(key: string): { table: StateTable; id: string } | null {
  const at = key.indexOf(":");
  const table = key.slice(0, at) as StateTable;
  return at <= 0 || !STATE_TABLES.includes(table) ? null : { table, id: key.slice(at + 1) };
}

function hashable(value: unknown): unknown {
  if (typeof value === "number") {
    if (!Number.isFinite(value)) return null;
    return Number.isInteger(value) && !Number.isSafeInteger(value) ? BigInt(value).toString() : value;
  }
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map(hashable);
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(value)) {
    const v = (value as Record<string, unknown>)[k];
    if (v !== undefined) out[k] = hashable(v);
  }
  return out;
}

/** The digest of one row of `table` (hex SHA-256), as an entry's `row_digests` names it. */
export function rowDigest(table: StateTable, row: object): string {
  const covered: Record<string, unknown> = {};
  const skip = UNCOVERED[table];
  for (const k of Object.keys(row)) {
    if (!skip.includes(k)) covered[k] = (row as Record<string, unknown>)[k];
  }
  const text = canonicalJson(hashable({ table, row: covered }));
  return createHash("sha256").update(text, "utf8").digest("hex");
}

const HEX64 = /^[0-9a-f]{64}$/;

/**
 * An entry's `row_digests` when its data carries a well-formed one; undefined when it carries none
 * (an entry written before row digests, or one that changed no row); null when the field is malformed.
 */
export function rowDigestsOf(
  data: Record<string, unknown>,
): Readonly<Record<string, string>> | undefined | null {
  const digests = data[ROW_DIGESTS_FIELD];
  if (digests === undefined) return undefined;
  return rowDigestsProblem(digests) === null ? (digests as Record<string, string>) : null;
}

/** Why a `row_digests` value is malformed, or null when it is an object of state-row keys to hex digests. */
export function rowDigestsProblem(digests: unknown): string | null {
  if (typeof digests !== "object" || digests === null || Array.isArray(digests)) return "must be an object";
  for (const [key, digest] of Object.entries(digests)) {
    if (parseRowKey(key) === null) return `key ${JSON.stringify(key)} names no state table`;
    if (typeof digest !== "string" || !HEX64.test(digest))
      return `${JSON.stringify(key)} must be a hex SHA-256`;
  }
  return null;
}
