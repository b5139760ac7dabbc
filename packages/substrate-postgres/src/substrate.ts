// The PostgreSQL Substrate: a pool, READ COMMITTED transactions with row locks, retry on deadlock.
// It holds no state of its own between transactions, so any number of processes can share a schema.
import { setTimeout as sleep } from "node:timers/promises";
import type { Substrate, SubstrateCapabilities, SubstrateTx } from "@leash/core";
import { SUBSTRATE_SPECIFICATION_VERSION, SubstrateError } from "@leash/core";
import type { PoolClient } from "pg";
import { Pool } from "pg";
import { PostgresBudgetStore } from "./budgets.js";
import { PostgresChainStore } from "./chain.js";
import { type TableNames, tableNames } from "./codec.js";
import { toSubstrateError } from "./errors.js";
import { PostgresHitlStore } from "./hitl.js";
import { runMigrations } from "./migrations.js";
import { PostgresNonceStore } from "./nonces.js";
import { PostgresOutboxStore } from "./outbox.js";
import { PostgresSessionStore } from "./sessions.js";
import { buildStatements, type Statements } from "./sql.js";
import { TxContext } from "./tx.js";

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
}

const DEFAULT_MAX_RETRIES = 8;
const DEFAULT_POOL_SIZE = 10;
// Full-jitter exponential backoff: conflicting transactions wake at different times instead of
// colliding again, and the cap keeps the worst case for the default retries under a second.
const BACKOFF_BASE_MS = 2;
const BACKOFF_CAP_MS = 100;

type Attempt<T> = { ok: true; value: T } | { ok: false; error: unknown; retry: boolean };

function describeUrl(url: string): string {
  try {
    const parsed = new URL(url);
    // Never the password: this text ends up in error messages and logs.
    return `${parsed.hostname || "localhost"}:${parsed.port || "5432"}${parsed.pathname}`;
  } catch {
    return "the given URL";
  }
}

export class PostgresSubstrate implements Substrate {
  readonly specificationVersion = SUBSTRATE_SPECIFICATION_VERSION;
  readonly kind = "postgres";
  readonly capabilities: SubstrateCapabilities = Object.freeze({ multiProcess: true, durable: true });

  private readonly pool: Pool;
  private readonly ownsPool: boolean;
  private readonly names: TableNames;
  private readonly sql: Statements;
  private readonly maxRetries: number;
  private readonly prepared: boolean;
  private readonly where: string;
  private readonly inflight = new Set<Promise<unknown>>();
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
    this.names = tableNames(schema);
    this.schema = schema ?? null;
    this.sql = buildStatements(this.names);
    this.maxRetries = maxRetries;
    this.prepared = options.preparedStatements ?? true;
    if (pool !== undefined) {
      this.pool = pool;
      this.ownsPool = false;
      this.where = "PostgreSQL (caller's pool)";
    } else {
      if (!/^postgres(ql)?:\/\//i.test(url!)) {
        throw new TypeError("url must start with postgres:// or postgresql://");
      }
      // Pipeline mode lets BEGIN and the first read share a round trip (see TxContext.pipelineBegin);
      // a pg without it ignores the option and every statement simply waits for the one before.
      this.pool = new Pool({
        connectionString: url,
        max: poolSize,
        application_name: "leash",
        pipeline: true,
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
          client.off("error", onError);
          client.release(broken);
        }
      })(),
    );
  }

  async transaction<T>(fn: (tx: SubstrateTx) => Promise<T>): Promise<T> {
    this.assertOpen("transaction");
    return this.track(this.run(fn));
  }

  /** Waits for transactions already running, then ends the pool if this substrate built it. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      await Promise.allSettled([...this.inflight]);
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

  private async run<T>(fn: (tx: SubstrateTx) => Promise<T>): Promise<T> {
    let last: unknown;
    for (let attempt = 0; attempt <= this.maxRetries; attempt++) {
      if (attempt > 0) {
        await sleep(Math.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** attempt));
      }
      const outcome = await this.attempt(fn);
      if (outcome.ok) return outcome.value;
      if (!outcome.retry) throw outcome.error;
      last = outcome.error;
    }
    throw new SubstrateError(
      "serialization",
      `transaction: still failing on a serialization failure or deadlock after ${this.maxRetries + 1} attempts`,
      { cause: last },
    );
  }

  /** One try: BEGIN, fn, COMMIT. Says whether a failure is worth another try. */
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
    const ctx = new TxContext(client, this.prepared, this.sql.keys.lock, this.names.rowKeyPrefix);
    try {
      const begin = client.query("BEGIN ISOLATION LEVEL READ COMMITTED");
      if ((client as { pipeline?: boolean }).pipeline === true) {
        // Saves a round trip per transaction: the first read goes out without waiting for BEGIN.
        ctx.pipelineBegin(begin);
      } else {
        try {
          await begin;
        } catch (error) {
          broken ??= error as Error;
          return { ok: false, error: toSubstrateError(error, "transaction: BEGIN"), retry: false };
        }
      }
      let value: T;
      try {
        value = await fn(this.stores(ctx));
      } catch (error) {
        ctx.finished = true;
        await ctx.drain();
        await ctx.settleBegin();
        broken ??= await this.rollback(client, ctx);
        // A deadlock victim is retried even when fn wrapped or replaced the error it saw.
        if (ctx.failure?.code === "serialization") return { ok: false, error: ctx.failure, retry: true };
        return { ok: false, error, retry: false };
      }
      ctx.finished = true;
      await ctx.drain();
      await ctx.settleBegin();
      if (ctx.failure !== null) {
        // fn swallowed a failed statement: PostgreSQL would answer COMMIT with a silent ROLLBACK.
        broken ??= await this.rollback(client, ctx);
        return { ok: false, error: ctx.failure, retry: ctx.failure.code === "serialization" };
      }
      try {
        await client.query("COMMIT");
      } catch (error) {
        const failure = toSubstrateError(error, "transaction: COMMIT");
        if (failure.code === "serialization") return { ok: false, error: failure, retry: true };
        broken ??= error as Error;
        if (failure.code !== "io") return { ok: false, error: failure, retry: false };
        // Retrying could apply fn twice: the server may have committed before the connection died.
        const unknown = new SubstrateError(
          "io",
          `transaction: the connection failed during COMMIT, so whether it committed is unknown: ${failure.message}`,
          { cause: error },
        );
        return { ok: false, error: unknown, retry: false };
      }
      return { ok: true, value };
    } finally {
      client.off("error", onError);
      // Passing an error makes the pool discard the connection instead of lending it out again.
      client.release(broken);
    }
  }

  private async rollback(client: PoolClient, ctx: TxContext): Promise<Error | undefined> {
    if (ctx.failure?.code === "io") return ctx.failure;
    try {
      await client.query("ROLLBACK");
      return undefined;
    } catch (error) {
      return error instanceof Error ? error : new Error(String(error));
    }
  }

  private stores(ctx: TxContext): SubstrateTx {
    return {
      sessions: new PostgresSessionStore(ctx, this.sql.sessions),
      nonces: new PostgresNonceStore(ctx, this.sql.nonces),
      budgets: new PostgresBudgetStore(ctx, this.sql.accounts, this.sql.reservations),
      hitl: new PostgresHitlStore(ctx, this.sql.hitl),
      chain: new PostgresChainStore(ctx, this.sql.chain),
      outbox: new PostgresOutboxStore(ctx, this.sql.outbox),
    };
  }
}

/**
 * Opens a PostgreSQL substrate and checks that the server answers (an unreachable server fails here
 * with code "io"). It does not create tables: call migrate() once at startup.
 */
export async function openPostgresSubstrate(options: PostgresSubstrateOptions): Promise<PostgresSubstrate> {
  const substrate = new PostgresSubstrate(options);
  try {
    await substrate.ping();
  } catch (error) {
    await substrate.close().catch(() => undefined);
    throw error;
  }
  return substrate;
}
