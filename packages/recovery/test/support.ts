// Test helpers: real substrates on fresh locations (memory, SQLite temp file, PostgreSQL schema, from
// @leash/test-stores), raw SQL to damage them the way a crash or an attacker would, and a build step. No mocks.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { Clock } from "@leash/core";
import {
  manualClock as handMovedClock,
  openStore as openTestStore,
  type TestStore as Store,
  type StoreKind,
  sqlInSchema,
} from "@leash/test-stores";
import Database from "better-sqlite3";

export const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));

export type Kind = StoreKind;
export { STORE_KINDS as KINDS } from "@leash/test-stores";
/** The substrates raw SQL can reach, for damage a running engine would never do. */
export const SQL_KINDS: Kind[] = ["sqlite", "postgres"];

/** A store with a scratch `dir` (checkpoints, NDJSON files) and a `url` child processes open (null for memory). */
export interface TestStore extends Store {
  /** Runs raw SQL against the store's tables (leash_chain, leash_outbox, …); not for memory. */
  sql(text: string, params?: unknown[]): Promise<void>;
}

export async function openStore(kind: Kind): Promise<TestStore> {
  const store = await openTestStore(kind, { label: "recovery", postgres: { poolSize: 4 } });
  const { path, schema } = store;
  const sql = async (text: string, params: unknown[] = []) => {
    if (path !== null) {
      const db = new Database(path);
      try {
        db.pragma("busy_timeout = 5000");
        db.prepare(text).run(...params);
      } finally {
        db.close();
      }
    } else if (schema !== null) {
      await sqlInSchema(schema, text, params);
    } else {
      throw new Error("the memory substrate has no SQL");
    }
  };
  return { ...store, sql };
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
export const manualClock = (startNs = 1_750_000_000_000_000_000): Clock & { advanceMs(ms: number): void } =>
  handMovedClock(startNs);

let built = false;
/** Child processes import the built dist: bring it up to date (incremental, about a second when current). */
export function ensureBuilt(): void {
  if (built) return;
  execFileSync(`${REPO_ROOT}node_modules/.bin/tsc`, ["--build"], { cwd: REPO_ROOT, stdio: "inherit" });
  built = true;
}
