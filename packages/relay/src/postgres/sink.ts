// The PostgreSQL audit-table sink: entries INSERTed into leash_audit_log, ON CONFLICT (entry_id) DO NOTHING.
// It lets daemons on SQLite ship to one central database; it is not a substrate and reads nothing back.

import type { ChainEntryRecord } from "@leash/core";
import { Pool } from "pg";
import { describeError, RelayError } from "../errors.js";
import {
  DELIVERED,
  type DeliveryOutcome,
  type DeliveryResult,
  permanent,
  retryable,
  SINK_SPECIFICATION_VERSION,
  type Sink,
} from "../sink.js";

export interface PostgresSinkOptions {
  /** A `postgres://` URL; the sink builds its own pool and ends it on close(). Give `url` or `pool`. */
  url?: string;
  /** A pool the caller owns: close() leaves it open. */
  pool?: Pool;
  /** Schema of the table, created when absent. Omitted: the connection's search_path decides. */
  schema?: string;
  /** Table name (default "leash_audit_log"), created when absent. */
  table?: string;
  /**
   * Written to the `source` column of every row (default null): which daemon or chain the entries come
   * from, when several ship to one table. Rows are still keyed by entry_id alone.
   */
  source?: string | null;
  /** Connections in the pool built from `url` (default 2: the relay delivers one batch at a time). */
  poolSize?: number;
  name?: string;
}

const DEFAULT_TABLE = "leash_audit_log";

function identifier(kind: string, value: string): string {
  if (typeof value !== "string" || value === "" || Buffer.byteLength(value) > 63 || value.includes("\0")) {
    throw new RelayError(
      "invalid_argument",
      `${kind} must be a PostgreSQL identifier, got ${JSON.stringify(value)}`,
    );
  }
  return `"${value.replaceAll('"', '""')}"`;
}

/** Exact digits, as text: pg would print a number above 2^53 with the shortest digits, not the integer. */
function int8(value: number): string {
  return BigInt(value).toString();
}

/**
 * Classes 22 (data exception) and 23 (integrity constraint): the rows themselves are refused, and the
 * same rows will be refused again. Anything else — connection loss, shutdown, lock timeouts, missing
 * privileges — is the server's or the operator's to fix, and is retried rather than made DEAD.
 */
function refusesRows(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && (code.startsWith("22") || code.startsWith("23"));
}

export class PostgresSink implements Sink {
  readonly specificationVersion = SINK_SPECIFICATION_VERSION;
  readonly name: string;
  readonly #pool: Pool;
  readonly #ownsPool: boolean;
  readonly #qualified: string;
  readonly #schema: string | null;
  readonly #tableName: string;
  readonly #source: string | null;
  readonly #insert: string;

  constructor(options: PostgresSinkOptions) {
    if ((options.url === undefined) === (options.pool === undefined)) {
      throw new RelayError("invalid_argument", "the PostgreSQL sink needs exactly one of `url` or `pool`");
    }
    this.#tableName = options.table ?? DEFAULT_TABLE;
    const table = identifier("table", this.#tableName);
    this.#schema = options.schema ?? null;
    this.#qualified = this.#schema === null ? table : `${identifier("schema", this.#schema)}.${table}`;
    this.#source = options.source ?? null;
    if (options.pool !== undefined) {
      this.#pool = options.pool;
      this.#ownsPool = false;
    } else {
      this.#pool = new Pool({
        connectionString: options.url,
        max: options.poolSize ?? 2,
        application_name: "leash-relay",
      });
      // An idle connection dying (server restart) must not crash the process; the next query reports it.
      this.#pool.on("error", () => undefined);
      this.#ownsPool = true;
    }
    this.name =
      options.name ?? `postgres:${this.#schema === null ? "" : `${this.#schema}.`}${this.#tableName}`;
    // One statement per batch: arrays in, unnest to rows. Conflicting entry ids insert nothing, which
    // is what makes redelivery harmless.
    this.#insert = `INSERT INTO ${this.#qualified}
  (entry_id, seq, entry_hash, prev_hash, body, signature, key_id, kind, session_id, created_ns, source)
SELECT u.entry_id, u.seq, u.entry_hash, u.prev_hash, u.body, u.signature, u.key_id, u.kind, u.session_id,
  u.created_ns, $11::text
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
  $9::text[], $10::bigint[])
  AS u(entry_id, seq, entry_hash, prev_hash, body, signature, key_id, kind, session_id, created_ns)
ON CONFLICT (entry_id) DO NOTHING`;
  }

  /** Creates the schema and table when absent; safe to run from several relays at once. */
  async migrate(): Promise<void> {
    const client = await this.#pool.connect();
    let broken: Error | undefined;
    try {
      await client.query("BEGIN");
      // Concurrent CREATE … IF NOT EXISTS can still collide in the catalog: queue up on a lock instead.
      await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`leash-relay:${this.#qualified}`]);
      if (this.#schema !== null)
        await client.query(`CREATE SCHEMA IF NOT EXISTS ${identifier("schema", this.#schema)}`);
      // body is text, never jsonb: jsonb would reorder keys and respell numbers, breaking the signature.
      await client.query(`CREATE TABLE IF NOT EXISTS ${this.#qualified} (
  entry_id text PRIMARY KEY,
  seq bigint NOT NULL,
  entry_hash text NOT NULL,
  prev_hash text NOT NULL,
  body text NOT NULL,
  signature text NOT NULL,
  key_id text NOT NULL,
  kind text NOT NULL,
  session_id text,
  created_ns bigint NOT NULL,
  source text,
  received_at timestamptz NOT NULL DEFAULT now()
)`);
      await client.query(
        `CREATE INDEX IF NOT EXISTS ${identifier("index", `${this.#tableName}_by_session`)} ON ${this.#qualified} (session_id, seq)`,
      );
      await client.query("COMMIT");
    } catch (error) {
      broken = error instanceof Error ? error : new Error(String(error));
      await client.query("ROLLBACK").catch(() => undefined);
      throw error;
    } finally {
      client.release(broken);
    }
  }

  #params(entries: readonly ChainEntryRecord[]): unknown[] {
    return [
      entries.map((e) => e.entry_id),
      entries.map((e) => int8(e.seq)),
      entries.map((e) => e.entry_hash),
      entries.map((e) => e.prev_hash),
      entries.map((e) => e.body),
      entries.map((e) => e.signature),
      entries.map((e) => e.key_id),
      entries.map((e) => e.kind),
      entries.map((e) => e.session_id),
      entries.map((e) => int8(e.created_ns)),
      this.#source,
    ];
  }

  async deliver(batch: readonly ChainEntryRecord[]): Promise<DeliveryResult> {
    if (batch.length === 0) return { outcomes: [] };
    try {
      // One statement is one transaction: the whole batch is committed, or none of it.
      await this.#pool.query(this.#insert, this.#params(batch));
      return { outcomes: batch.map(() => DELIVERED) };
    } catch (error) {
      if (!refusesRows(error)) {
        const reason = `${this.name}: ${describeError(error)}`;
        return { outcomes: batch.map(() => retryable(reason)) };
      }
    }
    // Some row is refused: find which, one entry at a time in order, so the others still arrive.
    const outcomes: DeliveryOutcome[] = [];
    let stopped: string | null = null;
    for (const entry of batch) {
      if (stopped !== null) {
        outcomes.push(retryable(stopped));
        continue;
      }
      try {
        await this.#pool.query(this.#insert, this.#params([entry]));
        outcomes.push(DELIVERED);
      } catch (error) {
        const reason = `${this.name}: ${describeError(error)}`;
        if (refusesRows(error)) {
          outcomes.push(permanent(reason));
        } else {
          outcomes.push(retryable(reason));
          stopped = `not sent: an earlier insert failed (${reason})`;
        }
      }
    }
    return { outcomes };
  }

  async close(): Promise<void> {
    if (this.#ownsPool) await this.#pool.end();
  }
}

/** Opens the sink and creates its schema and table when absent. */
export async function openPostgresSink(options: PostgresSinkOptions): Promise<PostgresSink> {
  const sink = new PostgresSink(options);
  try {
    await sink.migrate();
  } catch (error) {
    await sink.close().catch(() => undefined);
    throw new RelayError("unavailable", `cannot prepare ${sink.name}: ${describeError(error)}`, {
      cause: error,
    });
  }
  return sink;
}
