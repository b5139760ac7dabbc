// Test stores for the library-mode commands: a fresh SQLite file or a fresh PostgreSQL schema per test.
// Nothing is mocked; each store is removed by cleanup(), the postgres schema with DROP SCHEMA … CASCADE.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
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
    return {
      kind,
      url: `sqlite:${join(dir, "leash.db")}`,
      dir,
      cleanup: async () => rmSync(dir, { recursive: true, force: true }),
    };
  }
  const schema = `leash_cli_${process.pid}_${++counter}_${Math.floor(Math.random() * 1e9)}`;
  return {
    kind,
    url: `${PG_URL}?schema=${schema}`,
    dir,
    cleanup: async () => {
      rmSync(dir, { recursive: true, force: true });
      await withPg((client) => client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
    },
  };
}
