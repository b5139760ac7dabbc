// A store as an older build left it, for migration tests: a SQLite file or PostgreSQL schema laid out at
// one schema version, holding a current store's rows. Not a check: what a migration keeps is each test's.

import { runMigrations, tableNames } from "@leash/substrate-postgres";
import { MIGRATIONS } from "@leash/substrate-sqlite";
import Database from "better-sqlite3";
import { type StoreLocation, withPg } from "./stores.js";

/** Where a SQL store's data lives: a SQLite file (`path`) or a schema of the test database (`schema`). */
export type SqlStoreAt = Pick<StoreLocation, "path" | "schema">;

/**
 * Lays `into` (a fresh SQLite file or PostgreSQL schema) out as the migrations up to `version` left it,
 * nothing after, and copies every row of `from` (a store of the same kind at the current version) into
 * it, column by column of its older tables. What the older build kept elsewhere (spent nonces as rows
 * of their own table, say) is the caller's to add.
 */
export async function storeAtVersion(into: SqlStoreAt, version: number, from: SqlStoreAt): Promise<void> {
  if (into.path !== null && from.path !== null) {
    sqliteAtVersion(into.path, version);
    copySqliteRows(into.path, from.path);
    return;
  }
  if (into.schema === null || from.schema === null) {
    throw new TypeError("storeAtVersion: both stores must be SQLite files or both PostgreSQL schemas");
  }
  await postgresAtVersion(into.schema, version);
  await copyPostgresRows(into.schema, from.schema);
}

function sqliteAtVersion(path: string, version: number): void {
  const wanted = MIGRATIONS.filter((m) => m.version <= version);
  if (wanted.at(-1)?.version !== version) throw new RangeError(`no SQLite schema version ${version}`);
  const db = new Database(path);
  try {
    db.exec("BEGIN IMMEDIATE");
    // The substrate's own runner is not exported; its version table typed out here instead (without
    // IF NOT EXISTS: a file that has one already is not the fresh one this is for).
    db.exec(
      "CREATE TABLE leash_schema_version (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at_ms INTEGER NOT NULL) STRICT",
    );
    const record = db.prepare("INSERT INTO leash_schema_version VALUES (?, ?, 0)");
    for (const migration of wanted) {
      db.exec(migration.sql);
      record.run(migration.version, migration.name);
    }
    db.exec("COMMIT");
  } finally {
    db.close();
  }
}

async function postgresAtVersion(schema: string, version: number): Promise<void> {
  const result = await withPg((client) => runMigrations(client, tableNames(schema), version));
  if (result.from !== 0 || result.to !== version) {
    throw new Error(
      `schema ${schema} migrated from ${result.from} to ${result.to}, not from 0 to ${version}`,
    );
  }
}

function copySqliteRows(into: string, from: string): void {
  const db = new Database(into);
  try {
    db.prepare("ATTACH DATABASE ? AS source").run(from);
    const tables = db
      .prepare(
        "SELECT name FROM main.sqlite_schema WHERE type = 'table' AND name LIKE 'leash_%' AND name != 'leash_schema_version'",
      )
      .pluck()
      .all() as string[];
    for (const table of tables) {
      const columns = (db.prepare(`PRAGMA main.table_info(${table})`).all() as Array<{ name: string }>)
        .map((c) => c.name)
        .join(", ");
      db.exec(`INSERT INTO main.${table} (${columns}) SELECT ${columns} FROM source.${table}`);
    }
    db.exec("DETACH DATABASE source");
  } finally {
    db.close();
  }
}

function copyPostgresRows(into: string, from: string): Promise<void> {
  return withPg(async (client) => {
    const { rows: tables } = await client.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.tables
       WHERE table_schema = $1 AND table_name LIKE 'leash_%' AND table_name <> 'leash_schema_version'`,
      [into],
    );
    for (const { table_name: table } of tables) {
      const { rows } = await client.query<{ column_name: string }>(
        `SELECT column_name FROM information_schema.columns
         WHERE table_schema = $1 AND table_name = $2 AND is_generated = 'NEVER' ORDER BY ordinal_position`,
        [into, table],
      );
      const columns = rows.map((r) => r.column_name).join(", ");
      // The chain head row exists from version 3 on: replaced by the source's.
      await client.query(`DELETE FROM "${into}".${table}`);
      await client.query(
        `INSERT INTO "${into}".${table} (${columns}) SELECT ${columns} FROM "${from}".${table}`,
      );
    }
  });
}
