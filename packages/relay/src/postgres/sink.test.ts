// The PostgreSQL audit-table sink on a real server, fed by relays from real SQLite and memory outboxes:
// every entry exactly once despite a crash before ack, exact bytes and integers, refusals and outages.

import type { ChainEntryRecord } from "@leash/core";
import { enqueueEntry } from "@leash/outbox";
import { Pool } from "pg";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import {
  appendEntries,
  closedPort,
  counts,
  eventually,
  makeEntry,
  manualClock,
  openStore,
  PG_URL,
  type Store,
} from "../../test/support.js";
import { RelayError } from "../errors.js";
import { createRelay } from "../relay.js";
import { type DeliveryResult, SINK_SPECIFICATION_VERSION, type Sink } from "../sink.js";
import { openPostgresSink, PostgresSink } from "./index.js";

const admin = new Pool({ connectionString: PG_URL, max: 2 });
const schemas: string[] = [];
const stores: Store[] = [];
const sinks: PostgresSink[] = [];
let counter = 0;

afterEach(async () => {
  await Promise.allSettled(sinks.splice(0).map((s) => s.close()));
  await Promise.allSettled(stores.splice(0).map((s) => s.close()));
});

afterAll(async () => {
  for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
});

function freshSchema(): string {
  const schema = `leash_relay_sink_${process.pid}_${Date.now().toString(36)}_${counter++}`;
  schemas.push(schema);
  return schema;
}

async function sink(schema: string, source: string | null = null): Promise<PostgresSink> {
  const s = await openPostgresSink({ url: PG_URL, schema, source });
  sinks.push(s);
  return s;
}

interface Row {
  entry_id: string;
  seq: string;
  body: string;
  created_ns: string;
  session_id: string | null;
  source: string | null;
  entry_hash: string;
  prev_hash: string;
  signature: string;
  key_id: string;
  kind: string;
}

async function rows(schema: string): Promise<Row[]> {
  const { rows: found } = await admin.query<Row>(
    `SELECT entry_id, seq::text AS seq, body, created_ns::text AS created_ns, session_id, source,
       entry_hash, prev_hash, signature, key_id, kind
     FROM "${schema}".leash_audit_log AS t ORDER BY t.seq`,
  );
  return found;
}

const asRow = (e: ChainEntryRecord, source: string | null) => ({
  entry_id: e.entry_id,
  seq: BigInt(e.seq).toString(),
  body: e.body,
  created_ns: BigInt(e.created_ns).toString(),
  session_id: e.session_id,
  source,
  entry_hash: e.entry_hash,
  prev_hash: e.prev_hash,
  signature: e.signature,
  key_id: e.key_id,
  kind: e.kind,
});

const SESSIONS = ["alpha", "beta", null, "gamma"];
const sessions = (n: number) => Array.from({ length: n }, (_, i) => SESSIONS[i % SESSIONS.length]!);

describe.each(["sqlite", "memory"] as const)("PostgreSQL audit-table sink from a %s outbox", (kind) => {
  it("receives every entry exactly once despite a relay crash between insert and ack", async () => {
    const st = await openStore(kind);
    stores.push(st);
    // An epoch-ns timestamp above 2^53: String() would print 1796012406975000300, the double is …320.
    const appended = await appendEntries(st.substrate, sessions(50), Number(1_796_012_406_975_000_320n));
    const schema = freshSchema();
    const central = await sink(schema, "daemon-1");
    const clock = manualClock();

    // The first relay inserts its batch, then dies before acking.
    let inserted = false;
    const crashing: Sink = {
      specificationVersion: SINK_SPECIFICATION_VERSION,
      name: "crashes-before-ack",
      async deliver(batch) {
        await central.deliver(batch);
        inserted = true;
        return new Promise<DeliveryResult>(() => undefined);
      },
    };
    const doomed = createRelay({
      substrate: st.substrate,
      sink: crashing,
      batchSize: 20,
      leaseMs: 150,
      clock,
    });
    void doomed.runOnce();
    expect(await eventually(() => inserted)).toBe(true);
    expect(await rows(schema)).toHaveLength(20);

    clock.advanceMs(150);
    const heir = createRelay({
      substrate: await st.another(),
      sink: central,
      batchSize: 15,
      leaseMs: 150,
      clock,
    });
    expect(await heir.drain()).toMatchObject({ claimed: 50, delivered: 50, failed: 0, dead: 0 });
    expect(await counts(st.substrate)).toEqual({ PENDING: 0, DELIVERED: 50, DEAD: 0 });

    const stored = await rows(schema);
    expect(stored).toEqual(appended.map((e) => asRow(e, "daemon-1")));
    expect(stored[0]!.created_ns).toBe("1796012406975000320");
    // Delivering everything again changes nothing.
    await central.deliver(appended);
    expect(await rows(schema)).toHaveLength(50);
  });
});

describe("PostgreSQL audit-table sink", () => {
  it("creates its schema and table when absent, safely from two sinks at once, and shares the table", async () => {
    const schema = freshSchema();
    const [one, two] = await Promise.all([sink(schema), sink(schema)]);
    const batch = Array.from({ length: 30 }, (_, i) => makeEntry(i, "0".repeat(64), `s${i % 3}`, 1_000 + i));
    const [a, b] = await Promise.all([one.deliver(batch), two.deliver(batch.slice(10))]);
    expect([...a.outcomes, ...b.outcomes].every((o) => o.status === "delivered")).toBe(true);
    expect((await rows(schema)).map((r) => r.entry_id)).toEqual(batch.map((e) => e.entry_id));
    expect(one.name).toBe(`postgres:${schema}.leash_audit_log`);
  });

  it("a row the database refuses becomes DEAD with the server's reason; the rest arrive", async () => {
    const appended = Array.from({ length: 6 }, (_, i) =>
      makeEntry(i, "0".repeat(64), `s${i % 2}`, 1_000 + i),
    );
    // A NUL character: PostgreSQL text cannot hold it (22021), a memory or SQLite chain can.
    const schema = freshSchema();
    const central = await sink(schema);
    const poisoned = { ...appended[2]!, body: `${appended[2]!.body}\u0000` };
    const result = await central.deliver([appended[0]!, appended[1]!, poisoned, appended[3]!, appended[5]!]);
    expect(result.outcomes.map((o) => o.status)).toEqual([
      "delivered",
      "delivered",
      "permanent",
      "delivered",
      "delivered",
    ]);
    expect(result.outcomes[2]).toMatchObject({ error: expect.stringContaining("22021") });
    expect((await rows(schema)).map((r) => Number(r.seq))).toEqual([0, 1, 3, 5]);

    // Through a relay: the central table refuses a kind (an operator's CHECK constraint, 23514).
    const st = await openStore("sqlite");
    stores.push(st);
    const schema2 = freshSchema();
    const guarded = await sink(schema2);
    await admin.query(
      `ALTER TABLE "${schema2}".leash_audit_log ADD CONSTRAINT known_kinds CHECK (kind IN ('decision', 'post_exec'))`,
    );
    await st.substrate.transaction(async (tx) => {
      let prev = "0".repeat(64);
      for (const [seq, kind] of ["decision", "key_rotation", "decision"].entries()) {
        const entry = { ...makeEntry(seq, prev, "alpha", 1_000 + seq), kind };
        await tx.chain.append(entry);
        await enqueueEntry(tx, entry);
        prev = entry.entry_hash;
      }
    });
    const r = createRelay({ substrate: st.substrate, sink: guarded, leaseMs: 5000 });
    expect(await r.drain()).toMatchObject({ delivered: 2, dead: 1, failed: 0 });
    const [dead] = await st.substrate.transaction((tx) => tx.outbox.list({ status: "DEAD" }));
    expect(dead).toMatchObject({ seq: 1, last_error: expect.stringMatching(/known_kinds.*23514/) });
    expect((await rows(schema2)).map((row) => [row.seq, row.kind])).toEqual([
      ["0", "decision"],
      ["2", "decision"],
    ]);
  });

  it("an unreachable database: open fails as unavailable, delivery is retryable", async () => {
    const port = await closedPort();
    const url = `postgres://postgres@127.0.0.1:${port}/test`;
    const error = await openPostgresSink({ url, schema: "nowhere" }).catch((e: unknown) => e);
    expect(RelayError.isInstance(error) && error.code).toBe("unavailable");
    const offline = new PostgresSink({ url, schema: "nowhere" });
    const result = await offline.deliver([makeEntry(0, "0".repeat(64), "s", 1)]);
    expect(result.outcomes[0]).toMatchObject({
      status: "retryable",
      error: expect.stringContaining("ECONNREFUSED"),
    });
    await offline.close();
  });

  it("refuses a bad identifier, or both url and pool", () => {
    for (const options of [{ url: PG_URL, table: "" }, { url: PG_URL, schema: "x".repeat(64) }, {}]) {
      const error = (() => {
        try {
          new PostgresSink(options);
          return null;
        } catch (e) {
          return e;
        }
      })();
      expect(RelayError.isInstance(error) && error.code, JSON.stringify(options)).toBe("invalid_argument");
    }
  });
});
