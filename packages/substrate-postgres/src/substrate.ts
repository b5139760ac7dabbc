// The PostgreSQL Substrate: a pool, READ COMMITTED transactions with row locks, group commit, retry on deadlock.
// It holds no state of its own between transactions, so any number of processes can share a schema.

import type { Substrate, SubstrateCapabilities, SubstrateTx } from "@leash/core";
import { SUBSTRATE_SPECIFICATION_VERSION, SubstrateError } from "@leash/core";
import type { PoolClient } from "pg";
import { Pool } from "pg";
import { type AllotmentStatements, allotmentStatements } from "./allotments.js";
import type { BatchMemory } from "./batch-memory.js";
import { type BatchHost, type Job, runBatch, SAVEPOINT } from "./batch-run.js";
import {
  type BatchWrites,
  type MultiRowStatements,
  multiAppendStatement,
  multiRowStatements,
} from "./batch-writes.js";
import { type TableNames, tableNames } from "./codec.js";
import { toSubstrateError } from "./errors.js";
import { type MessageStatements, messageStatements } from "./messages.js";
import { runMigrations } from "./migrations.js";
import {
  connectTimeoutOf,
  DEFAULT_MAX_RETRIES,
  DEFAULT_POOL_SIZE,
  describeUrl,
  type GroupCommitOptions,
  groupCommitOf,
  type PostgresSubstrateOptions,
  type PostgresSubstrateStats,
  withUrlOptions,
} from "./options.js";
import { backoff, isPipelined, release, run, type SoloHost } from "./solo-run.js";
import { buildStatements, type Statement, type Statements } from "./sql.js";
import { TxContext } from "./tx.js";
import { type Remembering, txStores } from "./tx-stores.js";

export type { GroupCommitOptions, PostgresSubstrateOptions, PostgresSubstrateStats } from "./options.js";
export { DURABILITY_BARRIER } from "./options.js";

/**
 * Transactions that find no batch running and none queued run alone, up to this many at once:
 * a lone caller pays no batching latency, and two transactions of one handle that wait for each
 * other (say, each holding a row the other wants) still both run, as they would without group commit.
 */
const SOLO_LIMIT = 2;

function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
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
  /** What the transactions this handle runs reach of it (batch-run.ts, solo-run.ts). */
  private readonly host: BatchHost & SoloHost;

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
    this.group = groupCommitOf(options.groupCommit);
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
    this.host = this.hostForRuns();
  }

  private hostForRuns(): BatchHost & SoloHost {
    const substrate = this;
    return {
      queue: this.queue,
      counters: this.counters,
      group: this.group,
      maxRetries: this.maxRetries,
      prepared: this.prepared,
      sql: this.sql,
      multi: this.multi,
      multiAppend: this.multiAppend,
      beginBatch: this.beginBatch,
      beginBatchLock: this.beginBatchLock,
      beginSolo: this.beginSolo,
      get solos() {
        return substrate.solos;
      },
      get contended() {
        return substrate.contended;
      },
      set contended(value) {
        substrate.contended = value;
      },
      context: (client, writes) => this.context(client, writes),
      stores: (ctx, memory) => this.stores(ctx, memory),
      connect: (doing) => this.connect(doing),
      shed: (count, error) => this.shed(count, error),
      runAlone: (job) => this.runAlone(job),
    };
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
      value = await run(this.host, job.fn);
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
        const end = await runBatch(this.host, client, () => broken);
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

  private stores(ctx: TxContext, memory?: BatchMemory): SubstrateTx & Remembering {
    return txStores(ctx, { sql: this.sql, messages: this.messageSql, allotments: this.allotmentSql }, memory);
  }
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
