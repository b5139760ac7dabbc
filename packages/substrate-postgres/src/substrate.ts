// The PostgreSQL Substrate: a pool, READ COMMITTED transactions with row locks, group commit, retry on deadlock.
// It holds no state of its own between transactions, so any number of processes can share a schema.

import { setTimeout as sleep } from "node:timers/promises";
import type { Substrate, SubstrateCapabilities, SubstrateTx } from "@leash/core";
import { SUBSTRATE_SPECIFICATION_VERSION, SubstrateError } from "@leash/core";
import type { PoolClient } from "pg";
import { Pool } from "pg";
import { type AllotmentStatements, allotmentStatements, PostgresAllotmentStore } from "./allotments.js";
import { type BatchMemory, newBatchMemory } from "./batch-memory.js";
import {
  BatchWrites,
  type MultiRowStatements,
  multiAppendStatement,
  multiRowStatements,
} from "./batch-writes.js";
import { PostgresBudgetStore } from "./budgets.js";
import { PostgresChainStore } from "./chain.js";
import { type TableNames, tableNames } from "./codec.js";
import { corkThisTurn } from "./cork.js";
import { toSubstrateError } from "./errors.js";
import { PostgresHitlStore } from "./hitl.js";
import { type MessageStatements, messageStatements, PostgresMessageStore } from "./messages.js";
import { runMigrations } from "./migrations.js";
import { PostgresNonceStore } from "./nonces.js";
import { PostgresOutboxStore } from "./outbox.js";
import { PostgresSessionStore } from "./sessions.js";
import { buildStatements, type Statement, type Statements } from "./sql.js";
import { TxContext } from "./tx.js";
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

const DEFAULT_MAX_RETRIES = 8;
const DEFAULT_POOL_SIZE = 10;
const DEFAULT_MAX_BATCH = 64;
const DEFAULT_MAX_BATCH_MS = 2;
// Full-jitter exponential backoff: conflicting transactions wake at different times instead of
// colliding again, and the cap keeps the worst case for the default retries under a second.
const BACKOFF_BASE_MS = 2;
const BACKOFF_CAP_MS = 100;
/**
 * Transactions that find no batch running and none queued run alone, up to this many at once:
 * a lone caller pays no batching latency, and two transactions of one handle that wait for each
 * other (say, each holding a row the other wants) still both run, as they would without group commit.
 */
const SOLO_LIMIT = 2;
const SAVEPOINT = "leash_tx";

type Attempt<T> = { ok: true; value: T } | { ok: false; error: unknown; retry: boolean };

interface Job {
  readonly fn: (tx: SubstrateTx) => Promise<unknown>;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
  /** Serialization failures counted against this transaction (see retryBatch), for maxRetries. */
  failures: number;
}

/** A transaction that ran in the open batch: it settles when the batch does. */
type Ran = { job: Job; ok: true; value: unknown } | { job: Job; ok: false; error: unknown };

/** How a batch ended, for the lane that ran it. */
interface BatchEnd {
  /** The connection cannot be lent out again. */
  broken?: Error;
  /** Its transactions were queued again after a serialization failure: back off this many steps. */
  retryStep?: number;
}

function describeUrl(url: string): string {
  try {
    const parsed = new URL(url);
    // Never the password: this text ends up in error messages and logs.
    return `${parsed.hostname || "localhost"}:${parsed.port || "5432"}${parsed.pathname}`;
  } catch {
    return "the given URL";
  }
}

function backoff(step: number): Promise<void> {
  return sleep(Math.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** step));
}

function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Gives a connection back to the pool; passing an error makes the pool discard it instead of lending it out again. */
/**
 * `connect_timeout=S` in the URL as pg's connectionTimeoutMillis: pg's JavaScript client reads the
 * parameter from no URL (only libpq does), so without this a connection opened while the server is
 * unreachable (a partition resets nothing) waits for TCP to give up, minutes, and so does its caller.
 */
function connectTimeoutOf(url: string): { connectionTimeoutMillis?: number } {
  const at = url.indexOf("?");
  const seconds = at < 0 ? null : new URLSearchParams(url.slice(at + 1)).get("connect_timeout");
  const ms = seconds === null ? Number.NaN : Number(seconds) * 1000;
  return Number.isFinite(ms) && ms > 0 ? { connectionTimeoutMillis: ms } : {};
}

function release(client: PoolClient, listener: (error: Error) => void, broken: Error | undefined): void {
  client.off("error", listener);
  client.release(broken);
}

/** The answer of beginBatchLock's try (a multi-statement query answers with one result per statement). */
function lockWasFree(answer: unknown): boolean | null {
  for (const result of Array.isArray(answer) ? answer : [answer]) {
    const free = (result as { rows?: Array<{ free?: unknown }> } | null)?.rows?.[0]?.free;
    if (typeof free === "boolean") return free;
  }
  return null;
}

function isPipelined(client: PoolClient): boolean {
  return (client as { pipeline?: boolean }).pipeline === true;
}

function gaveUp(maxRetries: number, last: unknown): SubstrateError {
  return new SubstrateError(
    "serialization",
    `transaction: still failing on a serialization failure or deadlock after ${maxRetries + 1} attempts`,
    { cause: last },
  );
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`${name} must be a positive integer, got ${String(value)}`);
  }
  return value;
}

export class PostgresSubstrate implements Substrate {
  readonly specificationVersion = SUBSTRATE_SPECIFICATION_VERSION;
  readonly kind = "postgres";
  readonly capabilities: SubstrateCapabilities = Object.freeze({ multiProcess: true, durable: true });

  private readonly pool: Pool;
  private readonly ownsPool: boolean;
  private readonly names: TableNames;
  private readonly sql: Statements;
  private readonly messageSql: MessageStatements;
  private readonly allotmentSql: AllotmentStatements;
  /** The multi-row forms a batch's held-back writes are sent with (see BatchWrites). */
  private readonly multi: MultiRowStatements;
  private readonly multiAppend: Statement;
  private readonly maxRetries: number;
  private readonly prepared: boolean;
  private readonly where: string;
  private readonly group: Required<GroupCommitOptions> | null;
  /** Whether another handle held the batch lock when this handle's last judged batch began (see earlyLockRelease). */
  private contended = false;
  /** BEGIN for a transaction of its own: the batch lock in shared mode (see beginBatch). */
  private readonly beginSolo: string;
  /**
   * BEGIN for a batch: the batch lock in exclusive mode, then the first savepoint. Without it two
   * batches could deadlock: batch A's first transaction locks the budget account and the chain
   * head, its second then waits for a session row that batch B (another process or lane) holds
   * while B waits for the budget account. PostgreSQL would break that only after deadlock_timeout
   * (1 s by default) and retry a whole batch. Every engine decision appends to the one chain, so
   * batches run one at a time anyway and the lock costs no real concurrency, whereas it makes a
   * batch's locks conflict with nothing still running. Solo transactions take it shared: they can
   * run side by side as before (deadlocks among them are retried as ever) but never beside a batch.
   */
  private readonly beginBatch: string;
  /** beginBatch without its savepoint, for a pipelined batch: its transactions take savepoints lazily (BatchWrites). */
  private readonly beginBatchLock: string;
  private readonly inflight = new Set<Promise<unknown>>();
  /** Transactions waiting for a batch, oldest first. */
  private readonly queue: Job[] = [];
  /** The loop running batches on one connection while any are queued. */
  private lane: Promise<void> | null = null;
  private solos = 0;
  private readonly counters: PostgresSubstrateStats = {
    committed: 0,
    rolledBack: 0,
    commits: 0,
    largestBatch: 0,
    multiRowWrites: 0,
    earlyLockReleases: 0,
  };
  private closed = false;
  private closing: Promise<void> | null = null;

  constructor(options: PostgresSubstrateOptions) {
    const { url, pool, schema, maxRetries = DEFAULT_MAX_RETRIES, poolSize = DEFAULT_POOL_SIZE } = options;
    if ((url === undefined) === (pool === undefined)) {
      throw new TypeError("openPostgresSubstrate needs exactly one of `url` or `pool`");
    }
    if (!Number.isInteger(maxRetries) || maxRetries < 0) {
      throw new RangeError(`maxRetries must be a non-negative integer, got ${maxRetries}`);
    }
    if (!Number.isInteger(poolSize) || poolSize < 1) {
      throw new RangeError(`poolSize must be a positive integer, got ${poolSize}`);
    }
    const group = options.groupCommit;
    if (group === false) {
      this.group = null;
    } else {
      const maxBatchMs = group?.maxBatchMs ?? DEFAULT_MAX_BATCH_MS;
      if (typeof maxBatchMs !== "number" || !Number.isFinite(maxBatchMs) || maxBatchMs < 0) {
        throw new RangeError(
          `groupCommit.maxBatchMs must be a finite number >= 0, got ${String(maxBatchMs)}`,
        );
      }
      const earlyLockRelease = group?.earlyLockRelease ?? "auto";
      if (!["auto", "always", "never"].includes(earlyLockRelease)) {
        throw new TypeError(
          `groupCommit.earlyLockRelease must be "auto", "always" or "never", got ${JSON.stringify(earlyLockRelease)}`,
        );
      }
      this.group = {
        maxBatch: positiveInteger("groupCommit.maxBatch", group?.maxBatch ?? DEFAULT_MAX_BATCH),
        maxBatchMs,
        earlyLockRelease,
      };
    }
    this.names = tableNames(schema);
    this.schema = schema ?? null;
    this.sql = buildStatements(this.names);
    this.messageSql = messageStatements(this.names);
    this.allotmentSql = allotmentStatements(this.names);
    this.multi = multiRowStatements(this.names);
    this.multiAppend = multiAppendStatement(this.names);
    this.maxRetries = maxRetries;
    this.prepared = options.preparedStatements ?? true;
    // The key is a checked identifier (tableNames), so it needs no escaping as a literal.
    const batchLock = `hashtextextended('${this.names.batchKey}', 0)`;
    this.beginSolo = `BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock_shared(${batchLock})`;
    // The try first says whether another transaction held the lock (see earlyLockRelease); taking
    // it again after is free (the transaction holds it twice until it ends) or waits, as before.
    this.beginBatchLock = `BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_try_advisory_xact_lock(${batchLock}) AS free; SELECT pg_advisory_xact_lock(${batchLock})`;
    this.beginBatch = `${this.beginBatchLock}; SAVEPOINT ${SAVEPOINT}`;
    if (pool !== undefined) {
      this.pool = pool;
      this.ownsPool = false;
      this.where = "PostgreSQL (caller's pool)";
    } else {
      if (!/^postgres(ql)?:\/\//i.test(url!)) {
        throw new TypeError("url must start with postgres:// or postgresql://");
      }
      // Pipeline mode lets BEGIN and the first read share a round trip (see TxContext.pipelineBegin)
      // and a batch's SAVEPOINTs travel without waiting for answers; a pg without it ignores the
      // option and every statement simply waits for the one before.
      this.pool = new Pool({
        connectionString: url,
        ...connectTimeoutOf(url!),
        max: poolSize,
        application_name: "leash",
        pipeline: true,
        // Idle connections do not keep the process alive: a script that forgot close() still exits.
        allowExitOnIdle: true,
      });
      // An idle connection that dies (server restart, network) emits "error" on the pool; unhandled,
      // that would crash the process. The next checkout reports the outage as an "io" error instead.
      this.pool.on("error", () => undefined);
      this.ownsPool = true;
      this.where = `PostgreSQL at ${describeUrl(url!)}`;
    }
  }

  /** The schema this substrate's tables live in (unquoted), or null for the connection's search_path. */
  readonly schema: string | null;

  /** A copy of the counters since open. */
  get stats(): PostgresSubstrateStats {
    return { ...this.counters };
  }

  /** Checks that the server answers; openPostgresSubstrate calls it so a bad URL fails at open. */
  async ping(): Promise<void> {
    this.assertOpen("ping");
    try {
      await this.pool.query("SELECT 1");
    } catch (error) {
      throw toSubstrateError(error, `open: cannot reach ${this.where}`);
    }
  }

  // async so that a closed handle rejects instead of throwing before the caller has a promise.
  async migrate(): Promise<void> {
    this.assertOpen("migrate");
    return this.track(
      (async () => {
        const client = await this.connect("migrate");
        let broken: Error | undefined;
        const onError = (error: Error) => {
          broken = error;
        };
        client.on("error", onError);
        try {
          await runMigrations(client, this.names);
        } catch (error) {
          // The migration may have failed half-way through a statement; never pool that session again.
          broken ??= error instanceof Error ? error : new Error(String(error));
          throw error;
        } finally {
          release(client, onError, broken);
        }
      })(),
    );
  }

  /**
   * Runs `fn` in a transaction. With group commit on, a transaction that finds others queued or a
   * batch running joins the next batch; its promise settles only after that batch's COMMIT.
   */
  async transaction<T>(fn: (tx: SubstrateTx) => Promise<T>): Promise<T> {
    this.assertOpen("transaction");
    return this.track(
      new Promise<T>((resolve, reject) => {
        const job: Job = { fn, resolve: resolve as (value: unknown) => void, reject, failures: 0 };
        if (
          this.group === null ||
          (this.lane === null && this.queue.length === 0 && this.solos < SOLO_LIMIT)
        ) {
          this.solos++;
          void this.runSolo(job).finally(() => {
            this.solos--;
          });
          return;
        }
        this.queue.push(job);
        this.lane ??= this.runLane();
      }),
    );
  }

  /** Waits for transactions already running or queued, then ends the pool if this substrate built it. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      await Promise.allSettled([...this.inflight]);
      // The lane lets go of its connection a turn after its last batch.
      while (this.lane !== null) await this.lane;
      if (this.ownsPool) {
        try {
          await this.pool.end();
        } catch (error) {
          throw toSubstrateError(error, "close");
        }
      }
    })();
    return this.closing;
  }

  private assertOpen(doing: string): void {
    if (this.closed) throw new SubstrateError("closed", `${doing}: the substrate is closed`);
  }

  private track<T>(work: Promise<T>): Promise<T> {
    const settled = work.then(
      () => undefined,
      () => undefined,
    );
    this.inflight.add(settled);
    void settled.then(() => this.inflight.delete(settled));
    return work;
  }

  private async connect(doing: string): Promise<PoolClient> {
    try {
      return await this.pool.connect();
    } catch (error) {
      throw toSubstrateError(error, `${doing}: cannot connect to ${this.where}`);
    }
  }

  private context(client: PoolClient, writes?: BatchWrites): TxContext {
    return new TxContext(
      client,
      this.prepared,
      this.sql.keys.lock,
      this.names.rowKeyPrefix,
      isPipelined(client),
      writes,
    );
  }

  private soloWrites(client: PoolClient): BatchWrites {
    return BatchWrites.solo(
      client,
      this.prepared,
      this.multi,
      { single: this.sql.chain.append.op, multi: this.multiAppend },
      (rows) => {
        this.counters.multiRowWrites += rows;
      },
    );
  }

  /** Runs a transaction by itself, as one that found no batch running would. */
  private runAlone(job: Job): void {
    this.solos++;
    void this.track(
      this.runSolo(job).finally(() => {
        this.solos--;
      }),
    );
  }

  private async runSolo(job: Job): Promise<void> {
    let value: unknown;
    try {
      value = await this.run(job.fn);
    } catch (error) {
      this.counters.rolledBack++;
      job.reject(error);
      return;
    }
    this.counters.committed++;
    this.counters.commits++;
    this.counters.largestBatch = Math.max(this.counters.largestBatch, 1);
    job.resolve(value);
  }

  private async run<T>(fn: (tx: SubstrateTx) => Promise<T>): Promise<T> {
    let last: unknown;
    for (let attempt = 0; attempt <= this.maxRetries; attempt++) {
      if (attempt > 0) await backoff(attempt);
      const outcome = await this.attempt(fn);
      if (outcome.ok) return outcome.value;
      if (!outcome.retry) throw outcome.error;
      last = outcome.error;
    }
    throw gaveUp(this.maxRetries, last);
  }

  /** One try of a transaction of its own: BEGIN, fn, COMMIT. Says whether a failure is worth another try. */
  private async attempt<T>(fn: (tx: SubstrateTx) => Promise<T>): Promise<Attempt<T>> {
    let client: PoolClient;
    try {
      client = await this.connect("transaction");
    } catch (error) {
      return { ok: false, error, retry: false };
    }
    // A checked-out client whose socket dies emits "error"; without a listener that kills the process.
    let broken: Error | undefined;
    const onError = (error: Error) => {
      broken = error;
    };
    client.on("error", onError);
    // Pipelined, deferred writes wait to go out a kind at a time (BatchWrites.solo); flushed before COMMIT.
    const writes = isPipelined(client) ? this.soloWrites(client) : undefined;
    const ctx = this.context(client, writes);
    try {
      if (isPipelined(client)) corkThisTurn(client);
      const begin = client.query(this.beginSolo);
      if (isPipelined(client)) {
        // Saves a round trip per transaction: the first read goes out without waiting for BEGIN.
        ctx.pipelineBegin(begin);
      } else {
        try {
          await begin;
        } catch (error) {
          const failure = toSubstrateError(error, "transaction: BEGIN");
          broken ??= await this.abort(client, failure);
          return { ok: false, error: failure, retry: false };
        }
      }
      let value: T;
      try {
        value = await fn(this.stores(ctx));
      } catch (error) {
        ctx.finished = true;
        await ctx.drain();
        await ctx.settleBegin();
        broken ??= await this.abort(client, ctx.failure);
        // A deadlock victim is retried even when fn wrapped or replaced the error it saw.
        if (ctx.failure?.code === "serialization") return { ok: false, error: ctx.failure, retry: true };
        return { ok: false, error, retry: false };
      }
      ctx.finished = true;
      writes?.flush();
      await ctx.drain();
      await ctx.settleBegin();
      if (ctx.failure !== null) {
        // fn swallowed a failed statement: PostgreSQL would answer COMMIT with a silent ROLLBACK.
        broken ??= await this.abort(client, ctx.failure);
        return { ok: false, error: ctx.failure, retry: ctx.failure.code === "serialization" };
      }
      try {
        await client.query("COMMIT");
      } catch (error) {
        const failure = toSubstrateError(error, "transaction: COMMIT");
        if (failure.code === "serialization") return { ok: false, error: failure, retry: true };
        broken ??= error as Error;
        return { ok: false, error: this.commitFailure(failure, error), retry: false };
      }
      return { ok: true, value };
    } finally {
      release(client, onError, broken);
    }
  }

  /** A failed COMMIT; when the connection failed, whether it committed is unknown, and retrying could apply fn twice. */
  private commitFailure(failure: SubstrateError, error: unknown): SubstrateError {
    if (failure.code !== "io") return failure;
    return new SubstrateError(
      "io",
      `transaction: the connection failed during COMMIT, so whether it committed is unknown: ${failure.message}`,
      { cause: error },
    );
  }

  /** Rolls the open transaction back; returns the error that makes the connection unfit to lend out again. */
  private async abort(client: PoolClient, failure: SubstrateError | null): Promise<Error | undefined> {
    if (failure?.code === "io") return failure;
    try {
      await client.query("ROLLBACK");
      return undefined;
    } catch (error) {
      return error instanceof Error ? error : new Error(String(error));
    }
  }

  /**
   * Runs batches on one connection while transactions are queued. Another turn of the event loop
   * is given before it lets go: callers whose transactions just resolved often queue the next at once.
   */
  private async runLane(): Promise<void> {
    let client: PoolClient | null = null;
    let broken: Error | undefined;
    const onError = (error: Error) => {
      broken ??= error;
    };
    try {
      for (;;) {
        if (this.queue.length === 0) {
          await nextTurn();
          if (this.queue.length === 0) return;
        }
        if (client === null) {
          try {
            client = await this.connect("transaction");
          } catch (error) {
            // Every queued transaction waited for this connection: they fail with it, as one would alone.
            this.shed(this.queue.length, error);
            continue;
          }
          broken = undefined;
          client.on("error", onError);
        }
        const end = await this.runBatch(client, () => broken);
        broken ??= end.broken;
        if (broken !== undefined) {
          release(client, onError, broken);
          client = null;
        }
        if (end.retryStep !== undefined) await backoff(end.retryStep);
      }
    } catch (error) {
      // runBatch settles every transaction it takes; should anything else fail, no caller may hang.
      this.shed(this.queue.length, error);
    } finally {
      if (client !== null) release(client, onError, broken);
      this.lane = null;
      if (this.queue.length > 0) this.lane = this.runLane();
    }
  }

  /** Rejects the `count` oldest queued transactions with `error`. */
  private shed(count: number, error: unknown): void {
    const failure = toSubstrateError(error, "transaction");
    for (const job of this.queue.splice(0, count)) {
      this.counters.rolledBack++;
      job.reject(failure);
    }
  }

  /**
   * One batch: BEGIN and the batch lock, then queued transactions one after another, each in the
   * savepoint before it, as long as maxBatch and maxBatchMs allow, then one COMMIT. A transaction
   * whose fn throws (or whose statement failed) is rolled back to its savepoint, which also clears
   * PostgreSQL's aborted state, so the next one runs on. Everything settles when the batch ends:
   * the failed with their own errors, the rest with their values once COMMIT succeeded. On a
   * serialization failure anywhere (a deadlock with some other client, a trigger, COMMIT) the
   * whole batch is rolled back and its transactions queued again in order, failed ones included:
   * each may have seen what an earlier one wrote, which is gone now.
   */
  private async runBatch(client: PoolClient, brokenBy: () => Error | undefined): Promise<BatchEnd> {
    const { maxBatch, maxBatchMs } = this.group!;
    const pipelined = isPipelined(client);
    const waiting = this.queue.length;
    const memory = newBatchMemory();
    const alone = this.solos === 0;
    try {
      // Pipelined, each transaction takes a savepoint only once it sends a statement (BatchWrites).
      const free = lockWasFree(await client.query(pipelined ? this.beginBatchLock : this.beginBatch));
      // Taken by another handle's transaction when this batch began: it, or others like it, will
      // be waiting for this one. Not judged while one of this handle's own lone transactions may
      // have held it.
      if (alone && this.solos === 0 && free !== null) this.contended = !free;
    } catch (error) {
      // Nothing ran; those that waited through this BEGIN fail with it, later arrivals get a new one.
      const failure = toSubstrateError(error, "transaction: BEGIN");
      this.shed(waiting, failure);
      return { broken: await this.abort(client, failure) };
    }
    const startedAt = performance.now();
    const backlog = this.queue.length;
    const ran: Ran[] = [];
    /** Answers of SAVEPOINT, RELEASE and ROLLBACK TO sent without waiting; each resolves to its error or null. */
    const controls: Promise<unknown>[] = [];
    const control = async (text: string): Promise<unknown> => {
      if (pipelined) corkThisTurn(client);
      const answer = client.query(text).then(
        () => null,
        (error: unknown) => error ?? new Error(`${text} failed`),
      );
      controls.push(answer);
      // pg queues a query sent while another runs only in pipeline mode; otherwise wait for the answer.
      return pipelined ? null : answer;
    };

    /** Transactions whose savepoint was released, in order; answers of their deferred writes may still be coming. */
    const released: Released[] = [];
    // Pipelined only: without pipelining every statement waits for the one before anyway.
    const writes = pipelined
      ? new BatchWrites(
          client,
          this.prepared,
          this.multi,
          { single: this.sql.chain.append.op, multi: this.multiAppend },
          SAVEPOINT,
          (rows) => {
            this.counters.multiRowWrites += rows;
          },
          (text) => void control(text),
        )
      : undefined;
    let job = this.queue.shift();
    while (job !== undefined) {
      const ctx = this.context(client, writes);
      const stores = this.stores(ctx, memory);
      let failed = false;
      let outcome: unknown;
      try {
        outcome = await job.fn(stores);
      } catch (error) {
        failed = true;
        outcome = error;
      }
      ctx.finished = true;
      // Written, not answered: its deferred writes are checked before COMMIT (see lateFailure), and
      // RELEASE and the next transaction go out behind them without waiting a round trip.
      await ctx.written();
      if (failed || ctx.failure !== null) {
        // What it held back goes nowhere; what it sent is undone by ROLLBACK TO below.
        writes?.drop(ctx);
        // Rolled back alone, as ever, but only once every answer before it is in: if a released
        // transaction's deferred write failed, this one only met the transaction that write aborted.
        await ctx.drain();
        const late = await lateFailure(released);
        if (late !== undefined) return this.undoBatch(client, ran, late, job);
      }
      const failure = ctx.failure;
      // A deadlock victim is retried even when fn wrapped or replaced the error it saw.
      if (failure?.code === "serialization") {
        return this.retryBatch(client, [...ran.map((r) => r.job), job], job, failure, true);
      }
      const dropped = brokenBy();
      const lost =
        dropped !== undefined
          ? toSubstrateError(dropped, "transaction")
          : failure?.code === "io"
            ? failure
            : undefined;
      if (lost !== undefined)
        return this.loseBatch(client, ran, { job, error: failed ? outcome : lost }, lost);
      if (!failed && failure !== null) {
        // fn swallowed a failed statement: it fails all the same, as it would alone.
        failed = true;
        outcome = failure;
      }
      ran.push(failed ? { job, ok: false, error: outcome } : { job, ok: true, value: outcome });
      // Its savepoint is released below (a refused RELEASE ends the batch, memory and all).
      if (!failed) {
        stores.rememberIn(memory);
        released.push({ job, ctx });
      }
      let refused: unknown = null;
      if (writes !== undefined) writes.endTransaction(ctx, !failed);
      else if (failed) refused = await control(`ROLLBACK TO SAVEPOINT ${SAVEPOINT}`);
      const next =
        refused === null &&
        ran.length < maxBatch &&
        (ran.length < backlog || performance.now() - startedAt < maxBatchMs)
          ? this.queue.shift()
          : undefined;
      // After ROLLBACK TO the savepoint still stands, empty, for the next transaction to run in.
      if (next !== undefined && !failed && writes === undefined) {
        refused = await control(`RELEASE SAVEPOINT ${SAVEPOINT}; SAVEPOINT ${SAVEPOINT}`);
        if (refused !== null) this.queue.unshift(next);
      }
      job = refused === null ? next : undefined;
    }

    const jobs = ran.map((r) => r.job);
    writes?.flush();
    const answered = Promise.all(controls);
    // Checked first: a failed deferred write makes every later statement, SAVEPOINTs included, fail too.
    const late = await lateFailure(released);
    if (late !== undefined) return this.undoBatch(client, ran, late, undefined);
    const refused = (await answered).find((answer) => answer !== null);
    if (refused !== undefined) {
      const failure = toSubstrateError(refused, "transaction: SAVEPOINT");
      if (failure.code === "serialization") {
        return this.retryBatch(client, jobs, undefined, failure, true);
      }
      return this.loseBatch(client, ran, undefined, failure);
    }
    if (!ran.some((r) => r.ok)) {
      const broken = await this.abort(client, null);
      this.settle(ran, null);
      return { broken };
    }
    const { earlyLockRelease } = this.group!;
    const early = earlyLockRelease === "always" || (earlyLockRelease === "auto" && this.contended);
    let command: string;
    try {
      // Sent with the COMMIT, in the same round trip on a pipelined connection.
      const asynchronous = early ? client.query("SET LOCAL synchronous_commit TO off") : null;
      const [, committed] = await Promise.allSettled([asynchronous, client.query("COMMIT")]);
      // Had the SET failed, the transaction was aborted and COMMIT answers ROLLBACK (checked below).
      if (committed.status === "rejected") throw committed.reason;
      ({ command } = committed.value);
    } catch (error) {
      const failure = toSubstrateError(error, "transaction: COMMIT");
      // A failed COMMIT has ended the transaction: nothing to roll back.
      if (failure.code === "serialization") {
        return this.retryBatch(client, jobs, undefined, failure, false);
      }
      this.settle(ran, this.commitFailure(failure, error));
      return { broken: error instanceof Error ? error : new Error(String(error)) };
    }
    if (command !== "COMMIT") {
      // PostgreSQL answers COMMIT of an aborted transaction with ROLLBACK; every control answer was
      // checked above, so this is not expected, but it must never pass for a commit.
      const failure = new SubstrateError("io", `transaction: COMMIT was answered with ${command}`);
      this.settle(ran, failure);
      return {};
    }
    this.counters.commits++;
    if (early) this.counters.earlyLockReleases++;
    this.counters.largestBatch = Math.max(this.counters.largestBatch, ran.length);
    try {
      if (early) await client.query(DURABILITY_BARRIER);
    } catch (error) {
      // Committed, and visible to others, but perhaps not yet on disk: as when a COMMIT's answer is lost.
      const failure = toSubstrateError(error, "transaction: durability barrier");
      this.settle(
        ran,
        new SubstrateError(
          "io",
          `transaction: committed, but the wait for its write-ahead log to reach disk failed, so whether it is durable is unknown: ${failure.message}`,
          { cause: error },
        ),
      );
      return { broken: error instanceof Error ? error : new Error(String(error)) };
    }
    this.settle(ran, null);
    return {};
  }

  /** Settles a batch's transactions: the failed with their errors, the rest with `failure` or their values. */
  private settle(ran: readonly Ran[], failure: SubstrateError | null): void {
    for (const r of ran) {
      if (r.ok && failure === null) {
        this.counters.committed++;
        r.job.resolve(r.value);
      } else {
        this.counters.rolledBack++;
        r.job.reject(r.ok ? failure : r.error);
      }
    }
  }

  /**
   * After a serialization failure: roll back, give up on those out of retries, queue the rest again
   * in order. A failure raised in one transaction's statement (`blamed`) counts against that one
   * only, so one that keeps failing cannot use up the retries of those sharing its batches; one at
   * COMMIT (a deferred trigger) cannot be told apart and counts against all.
   */
  private async retryBatch(
    client: PoolClient,
    jobs: readonly Job[],
    blamed: Job | undefined,
    failure: SubstrateError,
    rollback: boolean,
  ): Promise<BatchEnd> {
    const broken = rollback ? await this.abort(client, failure) : undefined;
    const again: Job[] = [];
    let step = 0;
    for (const job of jobs) {
      if (blamed === undefined || job === blamed) job.failures++;
      if (job.failures > this.maxRetries) {
        this.counters.rolledBack++;
        job.reject(gaveUp(this.maxRetries, failure));
      } else {
        again.push(job);
        step = Math.max(step, job.failures);
      }
    }
    this.queue.unshift(...again);
    return step === 0 ? { broken } : { broken, retryStep: step };
  }

  /**
   * A deferred write of a released transaction (`late.job`) failed: its savepoint is gone, so only
   * the whole batch can be rolled back. A serialization failure re-runs the batch (counted against
   * that transaction), an "io" failure loses it; otherwise that transaction fails with its error and
   * the others, `current` (the one running, not released) included, are queued again, in order, to
   * run in a new batch: each may have seen what the failed one wrote.
   */
  private async undoBatch(
    client: PoolClient,
    ran: readonly Ran[],
    late: LateFailure,
    current: Job | undefined,
  ): Promise<BatchEnd> {
    const jobs = ran.map((r) => r.job);
    if (current !== undefined) jobs.push(current);
    const failure = toSubstrateError(late.error, "transaction");
    if (failure.code === "serialization") return this.retryBatch(client, jobs, late.job, failure, true);
    if (late.shared && failure.code !== "io") {
      // A multi-row write failed as a whole: whose row it was cannot be told, so each transaction
      // runs again alone, where its writes go out one by one and a bad one fails only its own.
      const broken = await this.abort(client, failure);
      for (const again of jobs) this.runAlone(again);
      return { broken };
    }
    if (failure.code === "io") {
      // The one running fails with the batch (ok: its own outcome only met the aborted transaction).
      const lost: Ran[] = ran.map((r) => (r.job === late.job ? late : r));
      if (current !== undefined) lost.push({ job: current, ok: true, value: undefined });
      return this.loseBatch(client, lost, undefined, failure);
    }
    const broken = await this.abort(client, failure);
    this.counters.rolledBack++;
    late.job.reject(failure);
    this.queue.unshift(...jobs.filter((job) => job !== late.job));
    return { broken };
  }

  /**
   * The batch cannot commit (its connection failed, or a savepoint statement did): nothing of it
   * is committed. The transaction that was running fails with its own error, as do those that had
   * failed already; those that had succeeded fail with `failure`.
   */
  private async loseBatch(
    client: PoolClient,
    ran: readonly Ran[],
    current: { job: Job; error: unknown } | undefined,
    failure: SubstrateError,
  ): Promise<BatchEnd> {
    const broken = await this.abort(client, failure);
    const lost = new SubstrateError(
      failure.code,
      `transaction: rolled back with the rest of its batch before COMMIT: ${failure.message}`,
      { cause: failure },
    );
    this.settle(ran, lost);
    if (current !== undefined) {
      this.counters.rolledBack++;
      current.job.reject(current.error);
    }
    return { broken };
  }

  private stores(ctx: TxContext, memory?: BatchMemory): SubstrateTx & Remembering {
    const budgets = new PostgresBudgetStore(ctx, this.sql.accounts, this.sql.reservations, memory);
    const nonces = new PostgresNonceStore(ctx, this.sql.nonces, memory);
    const chain = new PostgresChainStore(ctx, this.sql.chain, nonces, memory);
    const appended = (seq: number) => chain.appendedSeqs.has(seq);
    const sessions = new PostgresSessionStore(ctx, this.sql.sessions, memory);
    const outbox = new PostgresOutboxStore(ctx, this.sql.outbox, appended);
    const messages = new PostgresMessageStore(ctx, this.messageSql);
    const allotments = new PostgresAllotmentStore(ctx, this.allotmentSql);
    return {
      allotments,
      sessions,
      nonces,
      budgets,
      hitl: new PostgresHitlStore(ctx, this.sql.hitl),
      chain,
      outbox,
      messages,
      // Every row goes out without waiting (held back, on a pipelined connection, to go out a kind
      // at a time: BatchWrites), then every answer is waited for, so it fails here, not at COMMIT.
      writeBatch: async (batch) => {
        for (const entry of batch.entries) {
          if (entry.nonce !== undefined && entry.nonce !== null && entry.session_id === null) {
            throw new TypeError("a chain entry with a nonce needs a session_id");
          }
        }
        const sent: Promise<void>[] = [];
        for (const entry of batch.entries) sent.push(chain.appendHeld(entry));
        for (const item of batch.outbox) sent.push(outbox.enqueueHeld(item));
        for (const reservation of batch.reservations) sent.push(budgets.insertReservationHeld(reservation));
        for (const session of batch.sessions) sent.push(sessions.updateHeld(session));
        for (const account of batch.accounts) sent.push(budgets.updateAccountHeld(account));
        if (batch.messages !== undefined) sent.push(messages.insertMany(batch.messages));
        await Promise.all(sent);
        await ctx.settleWrites("writeBatch");
      },
      rememberIn: (into) => {
        budgets.rememberIn(into);
        chain.rememberIn(into);
        sessions.rememberIn(into);
        nonces.rememberIn(into);
      },
    };
  }
}

/** A transaction of a batch whose savepoint was released, with the context its deferred answers reach. */
interface Released {
  readonly job: Job;
  readonly ctx: TxContext;
}

/**
 * Waits for the answers of the released transactions' deferred writes and returns the first that
 * failed (after it, PostgreSQL answers everything with 25P02, which later ones must not be blamed for).
 */
async function lateFailure(released: readonly Released[]): Promise<LateFailure | undefined> {
  await Promise.all(released.map((r) => r.ctx.drain()));
  const culprit = released.find((r) => r.ctx.failure !== null);
  return culprit === undefined
    ? undefined
    : { job: culprit.job, ok: false, error: culprit.ctx.failure, shared: culprit.ctx.sharedFailure };
}

/** A released transaction's deferred write that failed; `shared` when it cannot be pinned on it alone. */
type LateFailure = Ran & { ok: false; shared: boolean };

/** The stores of one batched transaction, which can hand what they know to the next one. */
interface Remembering {
  rememberIn(memory: BatchMemory): void;
}

/**
 * Opens a PostgreSQL substrate and checks that the server answers (an unreachable server fails here
 * with code "io"). It does not create tables: call migrate() once at startup.
 */
export async function openPostgresSubstrate(options: PostgresSubstrateOptions): Promise<PostgresSubstrate> {
  const substrate = new PostgresSubstrate(withUrlOptions(options));
  try {
    await substrate.ping();
  } catch (error) {
    await substrate.close().catch(() => undefined);
    throw error;
  }
  return substrate;
}

/**
 * Applies what the URL says (`?schema=`, `?group_commit=`) and hands pg the URL without them; an
 * option given both ways must agree, so a schema is never chosen silently.
 */
function withUrlOptions(options: PostgresSubstrateOptions): PostgresSubstrateOptions {
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
