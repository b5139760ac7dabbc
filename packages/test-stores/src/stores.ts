// Fresh real stores for tests: memory under a shared key, SQLite in a temp file, PostgreSQL in a new schema.
// Not a mock and not for production: every store is real, named after its package and removed when done.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Substrate } from "@leash/core";
import { createMemorySubstrate, deleteSharedMemory } from "@leash/substrate-memory";
import { openPostgresSubstrate, type PostgresSubstrateOptions } from "@leash/substrate-postgres";
import { openSqliteSubstrate, type SqliteSubstrateOptions } from "@leash/substrate-sqlite";
import Database from "better-sqlite3";
import pg from "pg";

/** The test database (LEASH_TEST_PG_URL overrides it); each PostgreSQL store is a fresh schema in it. */
export const PG_URL = process.env.LEASH_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";

export type StoreKind = "memory" | "sqlite" | "postgres";
export const STORE_KINDS: readonly StoreKind[] = ["memory", "sqlite", "postgres"];

export interface StoreOptions {
  /** Names the memory key, temp directory and schema after the package (`[a-z0-9]`), so a leftover is traceable. */
  readonly label: string;
  /** For every SQLite handle (absent: the substrate's defaults, group commit on). */
  readonly sqlite?: Omit<SqliteSubstrateOptions, "path">;
  /** For every PostgreSQL handle (absent: the substrate's defaults, a pool of 10). */
  readonly postgres?: Omit<PostgresSubstrateOptions, "url" | "pool" | "schema">;
}

/** Where a fresh store's data lives, for tests that let something else (a CLI, a child process) open it. */
export interface StoreLocation<K extends StoreKind = StoreKind> {
  readonly kind: K;
  /** What another process (or `--store`) opens: `sqlite:PATH`, `postgres://…?schema=…`; null for memory. */
  readonly url: K extends "memory" ? null : string;
  /** A scratch directory removed with the store (checkpoints, NDJSON files); the SQLite file lives in it. */
  readonly dir: string;
  /** The SQLite file, or null. */
  readonly path: K extends "sqlite" ? string : null;
  /** The PostgreSQL schema, or null. */
  readonly schema: K extends "postgres" ? string : null;
  /** Opens one more handle on the data, neither migrated nor closed for the caller. */
  open(): Promise<Substrate>;
  /** Deletes the data: the directory, the shared memory, the schema. Close every handle first. */
  remove(): Promise<void>;
}

/** One store, and as many handles on it as a test wants (two handles = two processes' connections). */
export interface TestStore<K extends StoreKind = StoreKind> {
  readonly kind: K;
  /** The first handle, migrated. */
  readonly substrate: Substrate;
  readonly url: StoreLocation<K>["url"];
  readonly dir: string;
  readonly path: StoreLocation<K>["path"];
  readonly schema: StoreLocation<K>["schema"];
  /** Another handle on the same data, migrated; closed by `close()`. */
  another(): Promise<Substrate>;
  /** Closes every handle, then deletes the data as `StoreLocation.remove` does. */
  close(): Promise<void>;
}

/** One client on PG_URL for `fn`, ended afterwards. */
export async function withPg<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Runs SQL inside one schema of the test database, behind Leash's back (to damage or inspect a store). */
export function sqlInSchema(schema: string, text: string, params?: unknown[]): Promise<void> {
  return withPg(async (client) => {
    await client.query(`SET search_path TO "${schema}"`);
    await client.query(text, params);
  });
}

/** Runs SQL on a SQLite file behind Leash's back (to damage or inspect a store); returns the rows of a SELECT. */
export function sqlInFile(path: string, text: string, params: unknown[] = []): unknown[] {
  const db = new Database(path);
  try {
    db.pragma("busy_timeout = 5000");
    const statement = db.prepare(text);
    if (statement.reader) return statement.all(...params);
    statement.run(...params);
    return [];
  } finally {
    db.close();
  }
}

let counter = 0;

/** A fresh, empty place for a store of `kind`; nothing opens it until `open()` does. */
export function freshLocation<K extends StoreKind>(kind: K, options: StoreOptions): StoreLocation<K> {
  const { label } = options;
  if (!/^[a-z0-9]+$/.test(label)) {
    throw new TypeError(`label must match [a-z0-9]+, got ${JSON.stringify(label)}`);
  }
  const id = `${process.pid}_${Date.now().toString(36)}_${counter++}_${Math.random().toString(36).slice(2, 8)}`;
  const dir = mkdtempSync(join(tmpdir(), `leash-test-${label}-`));
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  let location: StoreLocation;
  if (kind === "memory") {
    const key = `leash-test-${label}-${id}`;
    location = {
      kind,
      url: null,
      dir,
      path: null,
      schema: null,
      // Tests want a nested transaction to fail loudly; the AsyncLocalStorage it takes is a test cost only.
      open: async () => createMemorySubstrate({ shared: key, detectNestedTransactions: true }),
      remove: async () => {
        deleteSharedMemory(key);
        removeDir();
      },
    };
  } else if (kind === "sqlite") {
    const path = join(dir, "leash.db");
    location = {
      kind,
      url: `sqlite:${path}`,
      dir,
      path,
      schema: null,
      open: () => openSqliteSubstrate({ ...options.sqlite, path }),
      remove: async () => removeDir(),
    };
  } else {
    const schema = `leash_test_${label}_${id}`;
    location = {
      kind,
      url: `${PG_URL}?schema=${schema}`,
      dir,
      path: null,
      schema,
      open: () => openPostgresSubstrate({ ...options.postgres, url: PG_URL, schema }),
      remove: async () => {
        removeDir();
        await withPg((client) => client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
      },
    };
  }
  return location as StoreLocation<K>;
}

/** Opens a fresh store of `kind`, migrated; `close()` closes every handle and deletes the data. */
export async function openStore<K extends StoreKind>(kind: K, options: StoreOptions): Promise<TestStore<K>> {
  const location = freshLocation(kind, options);
  const handles: Substrate[] = [];
  const another = async () => {
    const handle = await location.open();
    handles.push(handle);
    await handle.migrate();
    return handle;
  };
  const close = async () => {
    await Promise.allSettled(handles.splice(0).map((h) => h.close()));
    await location.remove();
  };
  let substrate: Substrate;
  try {
    substrate = await another();
  } catch (error) {
    await close().catch(() => undefined);
    throw error;
  }
  const { url, dir, path, schema } = location;
  return { kind, substrate, url, dir, path, schema, another, close };
}
