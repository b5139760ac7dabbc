// The SQLite Substrate: one better-sqlite3 connection per handle, transactions queued, run one at a time, group-committed.
// It holds no domain rules and never retries: a busy, failed or rolled-back transaction is reported to its caller.

import type { Substrate, SubstrateCapabilities, SubstrateTx } from "@leash/core";
import { SUBSTRATE_SPECIFICATION_VERSION, SubstrateError } from "@leash/core";
import Database from "better-sqlite3";
import { type CheckpointStats, WalCheckpointer } from "./checkpointer.js";
import { sqliteCode, toSubstrateError } from "./errors.js";
import { type ResolvedOptions, resolveOptions, type SqliteSubstrateOptions } from "./options.js";
import { RowCache } from "./row-cache.js";
import { applyMigrations, readSchemaVersion, SCHEMA_VERSION, SchemaTooNewError } from "./schema.js";
import { SqliteTx, StatementCache } from "./stores.js";
import { WalSyncer } from "./wal-sync.js";

interface TxJob {
  readonly kind: "tx";
  /** performance.now() at enqueue: who has waited through a whole failed lock wait (see #shed). */
  readonly queuedAt: number;
  readonly fn: (tx: SubstrateTx) => Promise<unknown>;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
}

/** Work that takes the write lock itself (migrations), run between batches. */
interface ConnectionJob {
  readonly kind: "connection";
  readonly run: () => Promise<void>;
  readonly resolve: (value: undefined) => void;
  readonly reject: (error: unknown) => void;
}

type Job = TxJob | ConnectionJob;

/** A transaction of the open batch that succeeded: it resolves with its value once the batch commits. */
type Done = { job: TxJob; value: unknown };

/** Counters for tests and benchmarks: how much group commit saved. */
export interface SqliteSubstrateStats {
  /** Transactions whose function resolved and whose COMMIT succeeded. */
  committed: number;
  /** Transactions that left nothing behind: their function threw, or their BEGIN or shared COMMIT failed. */
  rolledBack: number;
  /** Successful COMMIT statements (each one fsync with synchronous=FULL); below `committed` when batched. */
  commits: number;
  /** The most transactions that ever shared one BEGIN IMMEDIATE … COMMIT. */
  largestBatch: number;
  /** WAL fsyncs run off the event loop (synchronous FULL); 0 when COMMIT fsyncs by itself or never does. */
  walSyncs: number;
  /** PASSIVE checkpoints of the background worker that copied frames (0 with backgroundCheckpoints false). */
  walCheckpoints: number;
  /** Times the writer paused between batches so the worker could start a full WAL over. */
  walRestarts: number;
  /** 1 once the checkpoint worker failed and this connection went back to checkpointing inside COMMIT. */
  checkpointWorkerFailures: number;
  /**
   * Transactions run a second time because a transaction after them in their batch failed having
   * written, which undid the whole batch (batches run without savepoints until one fails that way).
   */
  reruns: number;
}

const SAVEPOINT = "leash_tx";

export class SqliteSubstrate implements Substrate {
  readonly specificationVersion = SUBSTRATE_SPECIFICATION_VERSION;
  readonly kind = "sqlite";
  readonly capabilities: SubstrateCapabilities;
  readonly path: string;

  readonly #db: Database.Database;
  readonly #statements: StatementCache;
  /** Rows this connection wrote or read under the write lock; see RowCache for when it is trusted. */
  readonly #rows = new RowCache();
  readonly #dataVersion: Database.Statement;
  readonly #maxBatch: number;
  readonly #maxBatchMs: number;
  readonly #grouped: boolean;
  readonly #busyTimeoutMs: number;
  readonly #queue: Job[] = [];
  #draining = false;
  #closing = false;
  #closed = false;
  readonly #idle: Array<() => void> = [];
  #schemaReady = false;
  /** performance.now() bookkeeping for #breathe: lock handoff between processes. */
  #runStartedAt = 0;
  #lastReleaseAt = Number.NEGATIVE_INFINITY;
  #lastBusyAt = Number.NEGATIVE_INFINITY;
  readonly #stats: Omit<SqliteSubstrateStats, "walSyncs" | "walCheckpoints" | "walRestarts"> = {
    committed: 0,
    rolledBack: 0,
    commits: 0,
    largestBatch: 0,
    checkpointWorkerFailures: 0,
    reruns: 0,
  };
  /**
   * Batches left that give each transaction a savepoint of its own. None normally: a savepoint per
   * transaction costs SQLite a copy of every page the transaction touches, paid by every decision
   * for a rollback almost none needs, since a transaction that fails seldom has written anything. When one has,
   * its whole batch is undone and the others run again, here, with savepoints, so that a run of
   * failures cannot make them run again and again.
   */
  #guardedBatches = 0;
  readonly #begin: Database.Statement;
  readonly #commit: Database.Statement;
  readonly #rollback: Database.Statement;
  readonly #savepoint: Database.Statement;
  readonly #release: Database.Statement;
  readonly #rollbackTo: Database.Statement;
  /** Durability off the event loop (see walSyncedOffThread); null when COMMIT itself fsyncs, or never needs to. */
  readonly #syncer: WalSyncer | null;
  readonly #checkpoints: ResolvedOptions["backgroundCheckpoints"];
  /**
   * Started by this handle's CHECKPOINTER_AFTER_COMMITS-th COMMIT: a short-lived handle (a CLI command's)
   * never waits for a thread to start and stop, and its close checkpoints the little it wrote. Null again once stopped.
   */
  #checkpointer: WalCheckpointer | null = null;
  /** The worker's counters, kept after it stops (a handle starts one worker at most). */
  #checkpointStats: CheckpointStats = { passive: 0, restarts: 0 };

  /** Takes ownership of an open connection (WAL and pragmas already set); `openSqliteSubstrate` is the public way in. */
  constructor(db: Database.Database, options: ResolvedOptions) {
    this.#db = db;
    this.path = options.path;
    // With synchronous=NORMAL a WAL commit is not fsynced, so a power loss may undo it.
    this.capabilities = { multiProcess: true, durable: options.synchronous === "FULL" };
    this.#grouped = options.groupCommit !== false;
    this.#busyTimeoutMs = options.busyTimeoutMs;
    this.#maxBatch = options.groupCommit === false ? 1 : options.groupCommit.maxBatch;
    this.#maxBatchMs = options.groupCommit === false ? 0 : options.groupCommit.maxBatchMs;
    this.#statements = new StatementCache(db);
    this.#syncer = walSyncedOffThread(options) ? new WalSyncer(options.path) : null;
    this.#checkpoints = options.backgroundCheckpoints;
    // The worker checkpoints instead (see WalCheckpointer); until it starts, the WAL only grows.
    if (this.#checkpoints !== false) db.pragma("wal_autocheckpoint = 0");
    // IMMEDIATE takes the write lock up front: a deferred transaction that upgrades from read to
    // write can fail with SQLITE_BUSY at once, whereas waiting for the lock here is what busyTimeoutMs covers.
    this.#begin = db.prepare("BEGIN IMMEDIATE");
    this.#commit = db.prepare("COMMIT");
    this.#rollback = db.prepare("ROLLBACK");
    this.#savepoint = db.prepare(`SAVEPOINT ${SAVEPOINT}`);
    this.#release = db.prepare(`RELEASE ${SAVEPOINT}`);
    this.#rollbackTo = db.prepare(`ROLLBACK TO ${SAVEPOINT}`);
    this.#dataVersion = db.prepare("PRAGMA data_version").pluck();
  }

  get stats(): SqliteSubstrateStats {
    return {
      ...this.#stats,
      walSyncs: this.#syncer?.syncs ?? 0,
      walCheckpoints: this.#checkpointStats.passive,
      walRestarts: this.#checkpointStats.restarts,
    };
  }

  migrate(): Promise<void> {
    if (this.#closing) return Promise.reject(closedError("migrate"));
    return new Promise<void>((resolve, reject) => {
      this.#queue.push({
        kind: "connection",
        run: () => this.#migrate(),
        resolve,
        reject,
      });
      this.#kick();
    });
  }

  /**
   * Runs `fn` in a transaction. Transactions on one handle run one after another (one connection
   * cannot interleave two); those queued behind each other share one BEGIN IMMEDIATE … COMMIT, so
   * one fsync makes a whole batch durable. The promise settles only after that COMMIT. A transaction
   * that fails having written undoes its whole batch: the others are run again (`fn` is called a
   * second time, as the Substrate contract allows) in a batch that gives each a savepoint.
   * `fn` must not call `transaction` on the same handle: it would wait for itself.
   */
  transaction<T>(fn: (tx: SubstrateTx) => Promise<T>): Promise<T> {
    if (this.#closing) return Promise.reject(closedError("transaction"));
    return new Promise<T>((resolve, reject) => {
      this.#queue.push({
        kind: "tx",
        queuedAt: performance.now(),
        fn,
        resolve: resolve as (value: unknown) => void,
        reject,
      });
      this.#kick();
    });
  }

  /** Lets queued transactions finish, then closes the connection; later calls fail with "closed". */
  async close(): Promise<void> {
    this.#closing = true;
    if (this.#draining) await new Promise<void>((resolve) => this.#idle.push(resolve));
    if (this.#closed) return;
    this.#closed = true;
    try {
      // First, so that no checkpoint runs behind the final close (the last connection to close
      // checkpoints the whole WAL and removes it).
      await this.#stopCheckpointer();
      await this.#syncer?.close();
      this.#db.close();
    } catch (error) {
      throw toSubstrateError(error, `close ${this.path}`);
    }
  }

  #kick(): void {
    // Starting at once (not on a later tick) keeps a lone transaction free of added latency.
    if (!this.#draining) void this.#drain();
  }

  async #drain(): Promise<void> {
    this.#draining = true;
    if (performance.now() - this.#lastReleaseAt > HANDOFF_MS) this.#runStartedAt = performance.now();
    try {
      for (let job = this.#queue[0]; job !== undefined; job = this.#queue[0]) {
        if (job.kind === "connection") {
          this.#queue.shift();
          try {
            await job.run();
            job.resolve(undefined);
          } catch (error) {
            job.reject(error);
          }
          continue;
        }
        // Holding no lock: the one moment the checkpoint worker can start the WAL over.
        await this.#checkpointer?.pauseIfWanted();
        const waitStartedAt = performance.now();
        try {
          await this.#acquire();
        } catch (error) {
          this.#shed(toSubstrateError(error, "BEGIN IMMEDIATE"), waitStartedAt);
          continue;
        }
        await this.#runBatch();
        this.#lastReleaseAt = performance.now();
        if (this.#queue.length > 0) await this.#breathe();
      }
    } catch (error) {
      // #runBatch settles every job it takes; should that ever fail, no caller may hang.
      const failure = toSubstrateError(error, "transaction queue");
      for (const job of this.#queue.splice(0)) job.reject(failure);
    } finally {
      this.#draining = false;
      for (const wake of this.#idle.splice(0)) wake();
    }
  }

  /**
   * The pause between two back-to-back batches. Usually one macrotask: timers and I/O run (another
   * handle in this process polling for the lock, requests that then join the next batch). But another
   * process can only take the lock while it is free, and SQLite queues nobody, so after a long run of
   * batches the lock is left free for longer than a waiter's poll interval. The run is short once
   * this handle has itself met contention (SQLITE_BUSY) lately, long otherwise.
   */
  async #breathe(): Promise<void> {
    const now = performance.now();
    const slice = now - this.#lastBusyAt < CONTENDED_WINDOW_MS ? CONTENDED_SLICE_MS : SLICE_MS;
    if (now - this.#runStartedAt < slice) return nextTurn();
    await sleep(HANDOFF_MS);
    this.#runStartedAt = performance.now();
  }

  /**
   * BEGIN IMMEDIATE, waiting up to busyTimeoutMs for another connection's write lock. The wait is a
   * timer loop, not SQLite's busy handler (busy_timeout is 0): that handler sleeps the whole thread,
   * so a second handle in this process would stall the very event loop its lock holder needs.
   */
  async #acquire(): Promise<void> {
    const deadline = performance.now() + this.#busyTimeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        this.#begin.run();
        // Under the lock now: what another connection committed since our last batch shows here.
        this.#rows.checkDataVersion(this.#dataVersion.get() as number);
        return;
      } catch (error) {
        if (this.#db.inTransaction) this.#rollback.run();
        if (!sqliteCode(error)?.startsWith("SQLITE_BUSY")) throw error;
        this.#lastBusyAt = performance.now();
        if (this.#lastBusyAt >= deadline) throw error;
      }
      await (attempt === 0 ? nextTurn() : sleep(Math.min(2 ** (attempt - 1), MAX_POLL_MS)));
    }
  }

  /**
   * Rejects the head transaction after a failed BEGIN and, when busy, every transaction queued before
   * that wait began: they waited through all of it too. Later arrivals get a wait of their own.
   */
  #shed(failure: SubstrateError, waitStartedAt: number): void {
    const head = this.#queue.shift();
    if (head === undefined) return;
    this.#stats.rolledBack++;
    head.reject(failure);
    if (failure.code !== "busy") return;
    for (
      let next = this.#queue[0];
      next?.kind === "tx" && next.queuedAt <= waitStartedAt;
      next = this.#queue[0]
    ) {
      this.#queue.shift();
      this.#stats.rolledBack++;
      next.reject(failure);
    }
  }

  async #migrate(): Promise<void> {
    const action = `migrate ${this.path}`;
    try {
      await this.#acquire();
    } catch (error) {
      throw toSubstrateError(error, action);
    }
    try {
      this.#rows.clear();
      applyMigrations(this.#db);
      this.#commit.run();
      await this.#syncer?.durable();
      this.#schemaReady = true;
    } catch (error) {
      this.#rows.clear();
      if (this.#db.inTransaction) this.#rollback.run();
      if (error instanceof SchemaTooNewError) {
        throw new SubstrateError("corrupt", `${action}: ${error.message}`, { cause: error });
      }
      throw toSubstrateError(error, action);
    }
  }

  /** The next queued job if it is a transaction that may join the open batch. */
  #nextForBatch(size: number, startedAt: number): TxJob | undefined {
    const next = this.#queue[0];
    if (next === undefined || next.kind !== "tx") return undefined;
    if (size >= this.#maxBatch || performance.now() - startedAt >= this.#maxBatchMs) return undefined;
    this.#queue.shift();
    return next;
  }

  /** Checked under the write lock, once per handle, so a half-migrated store is never written to. */
  #ensureSchema(): void {
    if (this.#schemaReady) return;
    const version = readSchemaVersion(this.#db);
    if (version > SCHEMA_VERSION) {
      throw new SubstrateError(
        "corrupt",
        `${this.path}: ${new SchemaTooNewError(version, SCHEMA_VERSION).message}`,
      );
    }
    if (version < SCHEMA_VERSION) {
      throw new SubstrateError(
        "io",
        `${this.path} is at schema version ${version}, this build needs ${SCHEMA_VERSION}: call migrate() first`,
      );
    }
    this.#schemaReady = true;
  }

  /**
   * Runs the queued transactions inside the BEGIN IMMEDIATE `#acquire` opened: the head one and
   * whatever queues behind it (bounded by maxBatch and maxBatchMs). A throwing transaction is
   * rejected at once: with nothing written, nothing is undone; otherwise it is undone to its
   * savepoint in a guarded batch, and in an ordinary one (no savepoints) the whole batch is rolled
   * back and the transactions before it queued again, at the front, for a guarded batch. The others
   * resolve together after the one COMMIT, or all reject if it fails.
   */
  async #runBatch(): Promise<void> {
    let current = this.#firstOfBatch();
    if (current === undefined) return;
    const startedAt = performance.now();
    const done: Done[] = [];
    const guarded = this.#grouped && this.#guardedBatches > 0;
    if (this.#guardedBatches > 0) this.#guardedBatches--;
    let size = 0;
    try {
      while (current !== undefined) {
        size++;
        if (!(await this.#runInBatch(current, guarded, done))) return;
        current = this.#nextForBatch(size, startedAt);
      }
      if (done.length === 0) {
        this.#rollback.run();
        return;
      }
      this.#commit.run();
    } catch (error) {
      this.#loseBatch(error, current, done);
      return;
    }
    this.#settleCommitted(done, size);
  }

  /** The transaction at the head of the queue, once the schema is checked; undefined (it is settled) if not. */
  #firstOfBatch(): TxJob | undefined {
    const current = this.#queue[0]?.kind === "tx" ? (this.#queue.shift() as TxJob) : undefined;
    try {
      if (current === undefined) throw new Error("no transaction queued");
      this.#ensureSchema();
      return current;
    } catch (error) {
      this.#rows.clear();
      this.#rollback.run();
      if (current !== undefined) {
        this.#stats.rolledBack++;
        current.reject(toSubstrateError(error, "transaction"));
      }
      return undefined;
    }
  }

  /**
   * Runs one transaction of the batch, in its savepoint when guarded: false when the batch is over
   * (undone, its transactions settled or queued again). A failing SAVEPOINT or RELEASE throws.
   */
  async #runInBatch(current: TxJob, guarded: boolean, done: Done[]): Promise<boolean> {
    if (guarded) this.#savepoint.run();
    const tx = new SqliteTx(this.#statements, this.#rows);
    let failed = false;
    let outcome: unknown;
    try {
      outcome = await current.fn(tx);
    } catch (error) {
      failed = true;
      outcome = error;
    } finally {
      tx.finish();
    }
    // Whatever it cached may be about to roll back (or a failed statement may have left the
    // connection in doubt): start the next transaction from the file.
    if (failed || !this.#db.inTransaction) this.#rows.clear();
    if (!this.#db.inTransaction) {
      // SQLite rolled the whole transaction back itself (SQLITE_FULL, SQLITE_IOERR …): every
      // write of the batch is gone, including those of transactions that already succeeded.
      this.#stats.rolledBack += done.length + 1;
      current.reject(failed ? outcome : new SubstrateError("io", "SQLite rolled the transaction back"));
      const lost = new SubstrateError("io", "SQLite rolled back a transaction sharing this commit", {
        cause: outcome,
      });
      for (const { job } of done.splice(0)) job.reject(lost);
      return false;
    }
    if (failed && !guarded && tx.wrote) {
      // No savepoint to return to: undo the batch; those before it in the batch run again, guarded.
      this.#rollback.run();
      this.#stats.rolledBack++;
      current.reject(outcome);
      if (done.length > 0) {
        this.#stats.reruns += done.length;
        this.#queue.unshift(...done.map(({ job }) => job));
        this.#guardedBatches = GUARDED_BATCHES_AFTER_UNDO;
      }
      return false;
    }
    if (failed) {
      if (guarded) {
        this.#rollbackTo.run();
        this.#release.run();
      }
      this.#stats.rolledBack++;
      current.reject(outcome);
    } else {
      if (guarded) this.#release.run();
      done.push({ job: current, value: outcome });
    }
    return true;
  }

  /** A SAVEPOINT, RELEASE or the COMMIT failed: nothing of this batch is committed. */
  #loseBatch(error: unknown, current: TxJob | undefined, done: readonly Done[]): void {
    this.#rows.clear();
    const failure = toSubstrateError(error, "COMMIT");
    if (this.#db.open && this.#db.inTransaction) {
      try {
        this.#rollback.run();
      } catch {
        // The connection is failing already; the callers below learn it from `failure`.
      }
    }
    const lost = current === undefined ? done : [...done, { job: current, value: undefined }];
    this.#stats.rolledBack += lost.length;
    for (const { job } of lost) job.reject(failure);
  }

  /** After the COMMIT: the counters, and the callers told once the batch is durable. */
  #settleCommitted(done: readonly Done[], size: number): void {
    this.#stats.commits++;
    this.#stats.committed += done.length;
    if (this.#checkpointer === null && this.#stats.commits >= CHECKPOINTER_AFTER_COMMITS)
      this.#startCheckpointer();
    if (size > this.#stats.largestBatch) this.#stats.largestBatch = size;
    if (this.#syncer === null) {
      for (const { job, value } of done) job.resolve(value);
      return;
    }
    // Not awaited: the next batch runs while this one's fsync does, and these callers hear nothing
    // until it is done. A failed fsync fails them (their outcome is then unknown, as on power loss).
    this.#syncer.durable().then(
      () => {
        for (const { job, value } of done) job.resolve(value);
      },
      (error: unknown) => {
        for (const { job } of done) job.reject(error);
      },
    );
  }

  #startCheckpointer(): void {
    if (this.#checkpoints === false || this.#closing || this.#stats.checkpointWorkerFailures > 0) return;
    const checkpointer = new WalCheckpointer(
      {
        path: this.path,
        synchronous: this.#db.pragma("synchronous", { simple: true }) === 2 ? "FULL" : "NORMAL",
        fullfsync: this.#db.pragma("fullfsync", { simple: true }) === 1,
        restartFrames: this.#checkpoints.restartFrames,
        intervalMs: this.#checkpoints.intervalMs,
      },
      () => {
        // Only slower, never wrong: back to SQLite's own checkpoints inside COMMIT.
        this.#stats.checkpointWorkerFailures = 1;
        if (this.#db.open) this.#db.pragma("wal_autocheckpoint = 1000");
        if (this.#checkpointer === checkpointer) this.#stopCheckpointer().catch(() => undefined);
      },
    );
    this.#checkpointer = checkpointer;
    this.#checkpointStats = checkpointer.stats;
  }

  async #stopCheckpointer(): Promise<void> {
    const checkpointer = this.#checkpointer;
    if (checkpointer === null) return;
    this.#checkpointer = null;
    await checkpointer.close();
  }
}

/**
 * synchronous=FULL is kept as a promise (a resolved transaction survives power loss) but not as the
 * pragma: the connection runs NORMAL, which writes each WAL commit without fsyncing it, and WalSyncer
 * fsyncs the WAL on a pool thread before any caller hears back. Not on macOS, where only SQLite's
 * own F_FULLFSYNC (fullfsync=ON) reaches the platter and Node's fdatasync would not.
 */
function walSyncedOffThread(options: ResolvedOptions): boolean {
  return options.synchronous === "FULL" && process.platform !== "darwin";
}

function closedError(action: string): SubstrateError {
  return new SubstrateError("closed", `${action}: the SQLite substrate is closed`);
}

/** Commits after which a handle starts its checkpoint worker; until then its WAL only grows, by the few pages a commit touches, so a short-lived handle never pays for a worker thread. */
const CHECKPOINTER_AFTER_COMMITS = 64;
/** Batches with a savepoint per transaction after a failed writer undid a batch (see #guardedBatches). */
const GUARDED_BATCHES_AFTER_UNDO = 16;
/** Longest pause between two attempts to take another connection's write lock. */
const MAX_POLL_MS = 2;
/** How long the lock is left free after a long run of batches: longer than a waiter's poll interval. */
const HANDOFF_MS = MAX_POLL_MS + 2;
/** Longest run of back-to-back batches before a handoff pause, without and with recent contention. */
const SLICE_MS = 1000;
const CONTENDED_SLICE_MS = 50;
/** How long after meeting SQLITE_BUSY this handle counts as contended. */
const CONTENDED_WINDOW_MS = 5000;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Switches the file to WAL (readers never block the writer; a commit appends instead of rewriting
 * pages). The switch needs a moment of exclusive access, so several processes opening a fresh file
 * at once may see the pragma refused: retry within the busy timeout.
 */
async function enableWal(db: Database.Database, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let mode: unknown;
    try {
      mode = db.pragma("journal_mode = WAL", { simple: true });
    } catch (error) {
      if (!sqliteCode(error)?.startsWith("SQLITE_BUSY")) throw error;
    }
    if (typeof mode === "string" && mode.toLowerCase() === "wal") return;
    if (Date.now() >= deadline) {
      throw new SubstrateError(
        "busy",
        `could not switch ${db.name} to WAL mode (journal_mode is ${String(mode)})`,
      );
    }
    await sleep(10);
  }
}

/**
 * Opens (creating when missing) a SQLite database file as a Leash substrate: WAL, a busy timeout,
 * synchronous=FULL unless told otherwise, group commit on. Call `migrate()` before the first transaction.
 */
export async function openSqliteSubstrate(options: SqliteSubstrateOptions): Promise<SqliteSubstrate> {
  const resolved = resolveOptions(options);
  let db: Database.Database | undefined;
  try {
    // busy_timeout 0: lock waits are the substrate's own async loop (see #acquire).
    db = new Database(resolved.path, { timeout: 0 });
    await enableWal(db, resolved.busyTimeoutMs);
    db.pragma(`synchronous = ${walSyncedOffThread(resolved) ? "NORMAL" : resolved.synchronous}`);
    db.pragma(`mmap_size = ${resolved.mmapSizeBytes}`);
    // 64 MiB of page cache instead of 2: the hot pages (session rows, index leaves) stay parsed.
    db.pragma("cache_size = -65536");
    // Statement and savepoint journals (savepoints only in guarded batches) in memory, not temporary files.
    db.pragma("temp_store = MEMORY");
    // macOS only: a plain fsync there does not reach the platter; elsewhere these are no-ops.
    db.pragma(`fullfsync = ${resolved.synchronous === "FULL" ? "ON" : "OFF"}`);
    return new SqliteSubstrate(db, resolved);
  } catch (error) {
    db?.close();
    throw toSubstrateError(error, `open ${resolved.path}`);
  }
}
