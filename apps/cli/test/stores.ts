// Test stores for the library-mode commands: a fresh SQLite file or a fresh PostgreSQL schema per test, left for
// the CLI to create and open (located by @leash/test-stores). Nothing is mocked; cleanup() removes each store.
import { freshLocation, sqlInSchema } from "@leash/test-stores";
import Database from "better-sqlite3";

export { PG_URL, withPg } from "@leash/test-stores";

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

export async function testStore(kind: StoreKind): Promise<TestStore> {
  const { url, dir, path, schema, remove } = freshLocation(kind, { label: "cli" });
  return {
    kind,
    url,
    dir,
    exec: async (sql) => {
      if (path === null) return sqlInSchema(schema!, sql);
      const db = new Database(path, { fileMustExist: true });
      try {
        db.exec(sql);
      } finally {
        db.close();
      }
    },
    cleanup: remove,
  };
}
