// Test stores for the library-mode commands: a fresh SQLite file or a fresh PostgreSQL schema per test.
// Nothing is mocked; each store is removed by cleanup(), the postgres schema with DROP SCHEMA … CASCADE.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import pg from "pg";

export const PG_URL = process.env.LEASH_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";

export type StoreKind = "sqlite" | "postgres";
export const STORE_KINDS: StoreKind[] = ["sqlite", "postgres"];

export interface TestStore {
  readonly kind: StoreKind;
  /** What `--store` takes. */
  readonly url: string;
  /** A scratch directory that cleanup() removes (config files, params files). */
  readonly dir: string;
  /** Runs SQL straight on the store, behind Leash's back (to tamper with it); the schema is the search path. */
  exec(sql: string): Promise<void>;
  cleanup(): Promise<void>;
}

let counter = 0;

export async function withPg<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export async function testStore(kind: StoreKind): Promise<TestStore> {
  const dir = mkdtempSync(join(tmpdir(), "leash-cli-store-"));
  if (kind === "sqlite") {
    const path = join(dir, "leash.db");
    return {
      kind,
      url: `sqlite:${path}`,
      dir,
      exec: async (sql) => {
        const db = new Database(path, { fileMustExist: true });
        try {
          db.exec(sql);
        } finally {
          db.close();
        }
      },
      cleanup: async () => rmSync(dir, { recursive: true, force: true }),
    };
  }
  const schema = `leash_cli_${process.pid}_${++counter}_${Math.floor(Math.random() * 1e9)}`;
  return {
    kind,
    url: `${PG_URL}?schema=${schema}`,
    dir,
    exec: async (sql) => {
      await withPg(async (client) => {
        await client.query(`SET search_path TO "${schema}"`);
        await client.query(sql);
      });
    },
    cleanup: async () => {
      rmSync(dir, { recursive: true, force: true });
      await withPg((client) => client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
    },
  };
}
