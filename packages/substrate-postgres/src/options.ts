// The PostgreSQL substrate's options and counters, their defaults and checks, and what a store URL adds
// to them. It opens no connection; substrate.ts does.

import type { Pool } from "pg";
import { parsePostgresUrl } from "./url.js";

export interface GroupCommitOptions {
  /**
   * Most transactions that may share one COMMIT (default 64). Each one that writes gets its own
   * subtransaction (its SAVEPOINT); PostgreSQL keeps 64 of them per transaction in shared memory and
   * beyond that every other session's visibility checks take a slower path, so stay at or below 64.
   */
  maxBatch?: number;
  /**
   * Once a batch has been running this long, in milliseconds (default 2), it takes no transaction
   * that arrived after it began: a bound on the latency later arrivals can add to those before them.
   * Those already queued when it got its lock (they waited for it) always join, up to maxBatch:
   * left out, they would wait for another whole batch, and in other processes' batches too.
   */
  maxBatchMs?: number;
  /**
   * Whether a batch's COMMIT may hand its locks on before its write-ahead log is flushed
   * (synchronous_commit off for that transaction), with a durable commit right after it
   * (DURABILITY_BARRIER) waiting for the flush before any of its callers hears back: nobody hears
   * back before the batch is durable either way. "auto" (default) does so while other handles'
   * transactions contend for the batch lock (another held it when this handle's last batch began):
   * the next of theirs then runs during the flush. Alone, the barrier's extra round trip would only
   * cost.
   */
  earlyLockRelease?: "auto" | "always" | "never";
}

export interface PostgresSubstrateOptions {
  /** A `postgres://` (or `postgresql://`) URL; the substrate builds its own pool and ends it on close(). */
  url?: string;
  /** A pool the caller owns: close() leaves it open. Give `url` or `pool`, not both. */
  pool?: Pool;
  /**
   * The schema holding Leash's tables, created by migrate(); tenants and tests each get their own.
   * Omitted: unqualified names, resolved by the connection's search_path.
   */
  schema?: string;
  /** Retries of the whole transaction after a serialization failure or deadlock (default 8). */
  maxRetries?: number;
  /** Connections in the pool built from `url` (default 10); ignored when `pool` is given. */
  poolSize?: number;
  /**
   * Use named prepared statements (default true): each connection parses a statement once.
   * Turn off behind a pooler that cannot keep them, such as PgBouncer in transaction mode before 1.21.
   */
  preparedStatements?: boolean;
  /**
   * Group commit (default on): transactions that queue up on this handle run one after another on
   * one connection inside a single BEGIN … COMMIT, each in its own SAVEPOINT, so one COMMIT (one WAL
   * flush) makes the whole batch durable and the locks every engine decision shares (the budget
   * account, the chain head) pass from one transaction to the next without a COMMIT in between.
   * A transaction that fails is rolled back to its savepoint alone; the others resolve only after
   * the shared COMMIT and its log flush (see GroupCommitOptions.earlyLockRelease for when the COMMIT
   * hands its locks on before that flush). `false`: every transaction gets its own connection and COMMIT.
   * Once `fn` has resolved, its savepoint is released and the next transaction starts without
   * waiting for the answers of its deferred writes (writes whose outcome its locks, or the batch's,
   * already settle: `chain.append` after the head it holds, of an entry whose nonce (if any)
   * `nonces.has` told it is unspent, `outbox.enqueue` of an entry it appended after the head it holds,
   * inserts of ids it found absent under their key lock, updates of rows it holds); they are all
   * checked before COMMIT (see batch-writes.ts). A transaction
   * whose `fn` threw or that already knows a failure is rolled back to its savepoint alone, as
   * above. Should a deferred write turn out failed after its transaction was released (exceptional),
   * nothing of the batch commits: the whole batch is rolled back, that transaction rejects with its
   * error ("conflict" for a nonce spent, outbox seq or reservation id taken after all) and the others run
   * again in a new batch, so their `fn` is called once more; a late "serialization" failure re-runs
   * the batch as any serialization failure does, and a late "io" failure fails the whole batch.
   * With group commit on, `fn` must not wait for another transaction to finish: in a batch, the
   * second would run only after the first, and a batch holds off every other transaction on the
   * schema (see beginBatch). A transaction on an idle handle still runs alone, as without it.
   * On a pipelined connection (the pool built from `url`) deferred writes are held back until a
   * statement must follow them or the batch ends, then sent as one multi-row statement per kind
   * (see BatchWrites); a transaction takes its savepoint only when it first sends a statement, so
   * one answered wholly from the batch's memory takes none. Should a multi-row statement fail as a
   * whole, whose row was refused cannot be told: the batch rolls back and each of its transactions
   * runs again alone.
   */
  groupCommit?: GroupCommitOptions | false;
}

/**
 * Run after a batch's COMMIT made with synchronous_commit off (see earlyLockRelease), which released
 * its locks without waiting for the disk: a transaction of its own, on the same connection, whose
 * COMMIT waits, at the session's synchronous_commit level, until the write-ahead log is flushed up to
 * its commit record, which covers the batch's earlier one. Only then do the batch's callers hear back:
 * a verdict is never returned before it is durable. PostgreSQL flushes at COMMIT only for a
 * transaction that both took a transaction id and wrote WAL of its own (RecordTransactionCommit): one
 * that merely takes an id (txid_current()) commits without waiting, so the barrier writes a
 * transactional logical-decoding message (an xid and a WAL record, no table, any wal_level, callable
 * by every role; ignored by everything but logical decoding, which sees an empty "leash.barrier").
 * Another transaction may read the batch's rows before that flush; should the server crash in
 * between, those rows and everything committed after them are lost together, in log order, and none
 * of their callers heard back. The barrier commits at the session's own level, so a server set to
 * wait for synchronous replicas makes it wait for them too.
 */
export const DURABILITY_BARRIER = "SELECT pg_logical_emit_message(true, 'leash.barrier', '')";

/** Counters for tests and benchmarks: how much group commit saved. */
export interface PostgresSubstrateStats {
  /** Transactions whose function resolved and whose COMMIT succeeded. */
  committed: number;
  /**
   * Transactions that rejected: their function threw, a statement failed, or their (shared) COMMIT
   * failed; those whose connection failed during COMMIT, so that whether they committed is unknown, too.
   */
  rolledBack: number;
  /** Successful COMMIT statements (one WAL flush each); below `committed` when transactions shared them. */
  commits: number;
  /** The most transactions that ever shared one BEGIN … COMMIT. */
  largestBatch: number;
  /** Deferred writes of batches sent as rows of multi-row statements (see BatchWrites). */
  multiRowWrites: number;
  /** Batch COMMITs that handed their locks on before their log flush (see earlyLockRelease). */
  earlyLockReleases: number;
}

export const DEFAULT_MAX_RETRIES = 8;
export const DEFAULT_POOL_SIZE = 10;
const DEFAULT_MAX_BATCH = 64;
const DEFAULT_MAX_BATCH_MS = 2;

/** groupCommit as the substrate runs it (null: off), every default filled in and every value checked. */
export function groupCommitOf(
  group: GroupCommitOptions | false | undefined,
): Required<GroupCommitOptions> | null {
  if (group === false) return null;
  const maxBatchMs = group?.maxBatchMs ?? DEFAULT_MAX_BATCH_MS;
  if (typeof maxBatchMs !== "number" || !Number.isFinite(maxBatchMs) || maxBatchMs < 0) {
    throw new RangeError(`groupCommit.maxBatchMs must be a finite number >= 0, got ${String(maxBatchMs)}`);
  }
  const earlyLockRelease = group?.earlyLockRelease ?? "auto";
  if (!["auto", "always", "never"].includes(earlyLockRelease)) {
    throw new TypeError(
      `groupCommit.earlyLockRelease must be "auto", "always" or "never", got ${JSON.stringify(earlyLockRelease)}`,
    );
  }
  return {
    maxBatch: positiveInteger("groupCommit.maxBatch", group?.maxBatch ?? DEFAULT_MAX_BATCH),
    maxBatchMs,
    earlyLockRelease,
  };
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`${name} must be a positive integer, got ${String(value)}`);
  }
  return value;
}

export function describeUrl(url: string): string {
  try {
    const parsed = new URL(url);
    // Never the password: this text ends up in error messages and logs.
    return `${parsed.hostname || "localhost"}:${parsed.port || "5432"}${parsed.pathname}`;
  } catch {
    return "the given URL";
  }
}

/**
 * `connect_timeout=S` in the URL as pg's connectionTimeoutMillis: pg's JavaScript client reads the
 * parameter from no URL (only libpq does), so without this a connection opened while the server is
 * unreachable (a partition resets nothing) waits for TCP to give up, minutes, and so does its caller.
 */
export function connectTimeoutOf(url: string): { connectionTimeoutMillis?: number } {
  const at = url.indexOf("?");
  const seconds = at < 0 ? null : new URLSearchParams(url.slice(at + 1)).get("connect_timeout");
  const ms = seconds === null ? Number.NaN : Number(seconds) * 1000;
  return Number.isFinite(ms) && ms > 0 ? { connectionTimeoutMillis: ms } : {};
}

/**
 * Applies what the URL says (`?schema=`, `?group_commit=`) and hands pg the URL without them; an
 * option given both ways must agree, so a schema is never chosen silently.
 */
export function withUrlOptions(options: PostgresSubstrateOptions): PostgresSubstrateOptions {
  if (options.url === undefined) return options;
  const fromUrl = parsePostgresUrl(options.url);
  if (options.schema !== undefined && fromUrl.schema !== undefined && options.schema !== fromUrl.schema) {
    throw new TypeError(
      `the schema option (${JSON.stringify(options.schema)}) and the URL's ?schema= (${JSON.stringify(fromUrl.schema)}) differ`,
    );
  }
  const resolved: PostgresSubstrateOptions = {
    ...options,
    url: fromUrl.connection,
    schema: options.schema ?? fromUrl.schema,
  };
  if (options.groupCommit === undefined && fromUrl.groupCommit === false) resolved.groupCommit = false;
  return resolved;
}
