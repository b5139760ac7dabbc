// Test support: the three real substrates (memory, SQLite on a temp file, PostgreSQL in a fresh schema)
// and plausible chain entries. Not shipped (outside src); nothing here is a mock.

import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChainEntryRecord, Clock, Substrate } from "@leash/core";
import { createMemorySubstrate, deleteSharedMemory } from "@leash/substrate-memory";
import { openPostgresSubstrate } from "@leash/substrate-postgres";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";
import { Pool } from "pg";
import { enqueueEntry } from "../src/outbox.js";

export const PG_URL = process.env.LEASH_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
export type SubstrateKind = "memory" | "sqlite" | "postgres";
export const KINDS: readonly SubstrateKind[] = ["memory", "sqlite", "postgres"];

/** One store, and as many handles on it as a test wants (two handles = two relays' connections). */
export interface Store {
  readonly kind: SubstrateKind;
  readonly substrate: Substrate;
  /** Another handle on the same data, migrated; closed by `close()`. */
  another(): Promise<Substrate>;
  close(): Promise<void>;
}

let counter = 0;

export async function openStore(kind: SubstrateKind): Promise<Store> {
  const id = `${process.pid}_${Date.now().toString(36)}_${counter++}`;
  const handles: Substrate[] = [];
  let cleanup: () => Promise<void>;
  let open: () => Promise<Substrate>;
  if (kind === "memory") {
    const key = `outbox-test-${id}`;
    open = async () => createMemorySubstrate({ shared: key });
    cleanup = async () => void deleteSharedMemory(key);
  } else if (kind === "sqlite") {
    const dir = mkdtempSync(join(tmpdir(), "leash-outbox-"));
    // Group commit off: each test transaction commits alone, which is what the leases are about.
    open = () => openSqliteSubstrate({ path: join(dir, "leash.db"), groupCommit: false });
    cleanup = async () => rmSync(dir, { recursive: true, force: true });
  } else {
    const schema = `leash_outbox_test_${id}`;
    open = () => openPostgresSubstrate({ url: PG_URL, schema, poolSize: 4 });
    cleanup = async () => {
      const admin = new Pool({ connectionString: PG_URL, max: 1 });
      try {
        await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await admin.end();
      }
    };
  }
  const another = async () => {
    const handle = await open();
    handles.push(handle);
    await handle.migrate();
    return handle;
  };
  const substrate = await another();
  return {
    kind,
    substrate,
    another,
    close: async () => {
      await Promise.allSettled(handles.map((h) => h.close()));
      await cleanup();
    },
  };
}

/**
 * A clock the test moves by hand: leases expire when the test says so, not when a timer fires. It starts
 * below 2^53 so that adding milliseconds stays exact (real epoch-ns readings are 256 apart up there).
 */
export function manualClock(startNs = 1_000_000_000_000_000): Clock & { advanceMs(ms: number): void } {
  let now = startNs;
  return {
    nowNs: () => now,
    advanceMs: (ms) => {
      now += ms * 1_000_000;
    },
  };
}

const ZERO_HASH = "0".repeat(64);

/**
 * A plausible chain entry: a UUIDv7-shaped id, a body with non-ASCII text and escapes (bytes a careless
 * re-serialization would change), its real SHA-256, and a signature-shaped base64url string.
 */
export function makeEntry(
  seq: number,
  prevHash: string,
  sessionId: string | null,
  createdNs: number,
): ChainEntryRecord {
  const entryId = `01900000-0000-7000-8000-${seq.toString(16).padStart(12, "0")}`;
  const body =
    `{"data":{"note":"caf\u00e9 \\u2028 \\"q\\" \u{1F600}","seq_text":"${seq}"},"entry_id":"${entryId}",` +
    `"kind":"decision","prev_hash":"${prevHash}","seq":${seq},"session_id":${JSON.stringify(sessionId)},"v":1}`;
  return {
    seq,
    entry_id: entryId,
    entry_hash: createHash("sha256").update(body, "utf8").digest("hex"),
    prev_hash: prevHash,
    body,
    signature: createHash("sha512").update(body).digest("base64url"),
    key_id: "test-key-1",
    kind: "decision",
    session_id: sessionId,
    created_ns: createdNs,
  };
}

/**
 * Appends one entry per element of `sessions` after the current head and queues each, all in one
 * transaction — what the engine does for a decision. Returns the entries as stored.
 */
export async function appendEntries(
  substrate: Substrate,
  sessions: readonly (string | null)[],
  createdNs = 1_796_012_406_975_000_000,
): Promise<ChainEntryRecord[]> {
  return substrate.transaction(async (tx) => {
    const head = await tx.chain.head();
    let seq = head === null ? 0 : head.seq + 1;
    let prev = head === null ? ZERO_HASH : head.entry_hash;
    const entries: ChainEntryRecord[] = [];
    for (const session of sessions) {
      const entry = makeEntry(seq++, prev, session, createdNs);
      await tx.chain.append(entry);
      await enqueueEntry(tx, entry);
      prev = entry.entry_hash;
      entries.push(entry);
    }
    return entries;
  });
}
