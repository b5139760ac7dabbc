// Relay throughput benchmark (not a test): N entries from a SQLite outbox into the file and PostgreSQL sinks.
// It measures drain time only (the outbox is filled beforehand) and prints one JSON line per sink.
//
// Run after `tsc --build` (it imports dist):  node packages/relay/bench/relay.mjs
// Environment: N (default 20000), BATCH (relay batch size, default 500),
// LEASH_TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/test).

import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { enqueueEntry } from "@leash/outbox";
import { createRelay, openFileSink } from "@leash/relay";
import { openPostgresSink } from "@leash/relay/postgres";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";
import pg from "pg";

const N = Number(process.env.N ?? 20_000);
const BATCH = Number(process.env.BATCH ?? 500);
const PG_URL = process.env.LEASH_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const T0 = 1_796_012_406_975_000_000;

/** A decision-sized entry (a ~400-byte canonical body, a real SHA-256, a signature-sized string). */
function entry(seq, prevHash) {
  const session = `session-${seq % 64}`;
  const entryId = `01900000-0000-7000-8000-${seq.toString(16).padStart(12, "0")}`;
  const body =
    `{"chain_id":"bench","data":{"call_number":${seq},"decision":"ALLOW","params_digest":"${"ab".repeat(32)}",` +
    `"reason":"allowed","session_id":"${session}","tool":"search"},"entry_id":"${entryId}",` +
    `"key_id":"bench-key","kind":"decision","prev_hash":"${prevHash}","seq":${seq},"timestamp_ns":${T0 + seq * 1000},"v":1}`;
  return {
    seq,
    entry_id: entryId,
    entry_hash: createHash("sha256").update(body).digest("hex"),
    prev_hash: prevHash,
    body,
    signature: randomBytes(64).toString("base64url"),
    key_id: "bench-key",
    kind: "decision",
    session_id: session,
    created_ns: T0 + seq * 1000,
  };
}

async function filledOutbox(dir) {
  const substrate = await openSqliteSubstrate({ path: join(dir, "leash.db") });
  await substrate.migrate();
  let prev = "0".repeat(64);
  for (let start = 0; start < N; start += 1000) {
    await substrate.transaction(async (tx) => {
      for (let seq = start; seq < Math.min(N, start + 1000); seq++) {
        const e = entry(seq, prev);
        await tx.chain.append(e);
        await enqueueEntry(tx, e);
        prev = e.entry_hash;
      }
    });
  }
  return substrate;
}

async function run(sinkName, openSink, count) {
  const dir = mkdtempSync(join(tmpdir(), "leash-relay-bench-"));
  const substrate = await filledOutbox(dir);
  const { sink, cleanup } = await openSink(dir);
  try {
    const relay = createRelay({ substrate, sink, batchSize: BATCH, leaseMs: 60_000 });
    const started = process.hrtime.bigint();
    const drained = await relay.drain();
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    const delivered = await count();
    const outbox = await substrate.transaction((tx) => tx.outbox.counts());
    if (drained.delivered !== N || delivered !== N || outbox.DELIVERED !== N) {
      throw new Error(
        `${sinkName}: expected ${N}, relay ${drained.delivered}, sink ${delivered}, outbox ${outbox.DELIVERED}`,
      );
    }
    console.log(
      JSON.stringify({
        bench: "relay",
        sink: sinkName,
        source: "sqlite",
        entries: N,
        batch_size: BATCH,
        rounds: drained.rounds,
        seconds: Number(seconds.toFixed(3)),
        entries_per_sec: Math.round(N / seconds),
      }),
    );
  } finally {
    await sink.close();
    await substrate.close();
    await cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
}

let filePath;
await run(
  "file",
  async (dir) => {
    filePath = join(dir, "audit.ndjson");
    return { sink: await openFileSink({ path: filePath }), cleanup: async () => undefined };
  },
  async () => readFileSync(filePath, "utf8").split("\n").filter(Boolean).length,
);

const admin = new pg.Pool({ connectionString: PG_URL, max: 1 });
const schema = `leash_relay_bench_${process.pid}`;
try {
  await run(
    "postgres",
    async () => ({
      sink: await openPostgresSink({ url: PG_URL, schema, source: "bench" }),
      cleanup: () => admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`),
    }),
    async () =>
      Number((await admin.query(`SELECT count(*) AS n FROM "${schema}".leash_audit_log`)).rows[0].n),
  );
} finally {
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
}
