// Test helper: opens each real substrate the engine must work on (memory, SQLite file, PostgreSQL schema).
// Every opened store gets a fresh location and is removed by dispose(); nothing is mocked.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Substrate } from "@leash/core";
import { createMemorySubstrate } from "@leash/substrate-memory";
import { openPostgresSubstrate } from "@leash/substrate-postgres";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";
import pg from "pg";

export const PG_URL = process.env.LEASH_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";

export interface OpenedStore {
  substrate: Substrate;
  /** A store URL another process can open (`sqlite:…`, `postgres://…?schema=…`), or null for memory. */
  url: string | null;
  /** Opens a second handle on the same data. */
  reopen(): Promise<Substrate>;
  dispose(): Promise<void>;
}

export type SubstrateKind = "memory" | "sqlite" | "postgres";
export const KINDS: SubstrateKind[] = ["memory", "sqlite", "postgres"];

let counter = 0;

export async function openStore(kind: SubstrateKind): Promise<OpenedStore> {
  const opened: Substrate[] = [];
  const track = async (s: Promise<Substrate> | Substrate) => {
    const substrate = await s;
    await substrate.migrate();
    opened.push(substrate);
    return substrate;
  };
  const closeAll = async () => {
    for (const s of opened) await s.close().catch(() => undefined);
  };
  if (kind === "memory") {
    const shared = `engine-test-${process.pid}-${++counter}`;
    return {
      substrate: await track(createMemorySubstrate({ shared })),
      url: null,
      reopen: () => track(createMemorySubstrate({ shared })),
      dispose: closeAll,
    };
  }
  if (kind === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "leash-engine-"));
    const path = join(dir, "leash.db");
    return {
      substrate: await track(openSqliteSubstrate({ path })),
      url: `sqlite:${path}`,
      reopen: () => track(openSqliteSubstrate({ path })),
      dispose: async () => {
        await closeAll();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  }
  const schema = `leash_engine_${process.pid}_${++counter}_${Math.floor(Math.random() * 1e9)}`;
  return {
    substrate: await track(openPostgresSubstrate({ url: PG_URL, schema })),
    url: `${PG_URL}?schema=${schema}`,
    reopen: () => track(openPostgresSubstrate({ url: PG_URL, schema })),
    dispose: async () => {
      await closeAll();
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await client.end();
    },
  };
}
