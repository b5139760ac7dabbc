// Test helpers: real substrates on fresh locations (memory, SQLite temp file, PostgreSQL schema), raw SQL
// to damage them the way a crash or an attacker would, and a build step for child processes. No mocks.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Clock, Substrate } from "@leash/core";
import { createMemorySubstrate } from "@leash/substrate-memory";
import { openPostgresSubstrate } from "@leash/substrate-postgres";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";
import Database from "better-sqlite3";
import pg from "pg";

export const PG_URL = process.env.LEASH_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
export const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));

export type Kind = "memory" | "sqlite" | "postgres";
export const KINDS: Kind[] = ["memory", "sqlite", "postgres"];
/** The substrates raw SQL can reach, for damage a running engine would never do. */
export const SQL_KINDS: Kind[] = ["sqlite", "postgres"];

export interface TestStore {
  kind: Kind;
  substrate: Substrate;
  /** A URL another process can open (`sqlite:PATH`, `postgres://…?schema=…`), or null for memory. */
  url: string | null;
  /** A scratch directory removed with the store (checkpoints, NDJSON files). */
  dir: string;
  /** Opens another handle on the same data. */
  reopen(): Promise<Substrate>;
  /** Runs raw SQL against the store's tables (leash_chain, leash_outbox, …); not for memory. */
  sql(text: string, params?: unknown[]): Promise<void>;
  dispose(): Promise<void>;
}

let counter = 0;

export async function openStore(kind: Kind): Promise<TestStore> {
  const dir = mkdtempSync(join(tmpdir(), "leash-recovery-"));
  const opened: Substrate[] = [];
  const track = async (s: Promise<Substrate> | Substrate): Promise<Substrate> => {
    const substrate = await s;
    await substrate.migrate();
    opened.push(substrate);
    return substrate;
  };
  const closeAll = async () => {
    for (const s of opened.splice(0)) await s.close().catch(() => undefined);
  };
  if (kind === "memory") {
    const shared = `recovery-test-${process.pid}-${++counter}`;
    return {
      kind,
      substrate: await track(createMemorySubstrate({ shared })),
      url: null,
      dir,
      reopen: () => track(createMemorySubstrate({ shared })),
      sql: () => Promise.reject(new Error("the memory substrate has no SQL")),
      dispose: async () => {
        await closeAll();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  if (kind === "sqlite") {
    const path = join(dir, "leash.db");
    return {
      kind,
      substrate: await track(openSqliteSubstrate({ path })),
      url: `sqlite:${path}`,
      dir,
      reopen: () => track(openSqliteSubstrate({ path })),
      sql: async (text, params = []) => {
        const db = new Database(path);
        try {
          db.pragma("busy_timeout = 5000");
          db.prepare(text).run(...params);
        } finally {
          db.close();
        }
      },
      dispose: async () => {
        await closeAll();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  const schema = `leash_recovery_${process.pid}_${++counter}_${Math.floor(Math.random() * 1e9)}`;
  const open = () => openPostgresSubstrate({ url: PG_URL, schema, poolSize: 4 });
  return {
    kind,
    substrate: await track(open()),
    url: `${PG_URL}?schema=${schema}`,
    dir,
    reopen: () => track(open()),
    sql: async (text, params = []) => {
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      try {
        await client.query(`SET search_path TO "${schema}"`);
        await client.query(text, params);
      } finally {
        await client.end();
      }
    },
    dispose: async () => {
      await closeAll();
      rmSync(dir, { recursive: true, force: true });
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      try {
        await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await client.end();
      }
    },
  };
}

/** Cuts the chain back to `count` entries the way an attacker would: rows, outbox and (PostgreSQL) head row. */
export async function deleteTail(store: TestStore, count: number): Promise<void> {
  const param = store.kind === "sqlite" ? "?" : "$1";
  await store.sql(`DELETE FROM leash_chain WHERE seq >= ${param}`, [count]);
  await store.sql(`DELETE FROM leash_outbox WHERE seq >= ${param}`, [count]);
  if (store.kind === "postgres") {
    await store.sql(
      "UPDATE leash_chain_head SET seq = c.seq, entry_hash = c.entry_hash FROM leash_chain c WHERE c.seq = $1",
      [count - 1],
    );
  }
}

/** `?` for SQLite, `$n` for PostgreSQL. */
export function param(store: TestStore, n: number): string {
  return store.kind === "sqlite" ? "?" : `$${n}`;
}

/** A clock the test moves by hand, starting near the real epoch time (the stores expect epoch ns). */
export function manualClock(startNs = 1_750_000_000_000_000_000): Clock & { advanceMs(ms: number): void } {
  let now = startNs;
  return {
    nowNs: () => now,
    advanceMs: (ms: number) => {
      now += ms * 1e6;
    },
  };
}

let built = false;
/** Child processes import the built dist: bring it up to date (incremental, about a second when current). */
export function ensureBuilt(): void {
  if (built) return;
  execFileSync(`${REPO_ROOT}node_modules/.bin/tsc`, ["--build"], { cwd: REPO_ROOT, stdio: "inherit" });
  built = true;
}
