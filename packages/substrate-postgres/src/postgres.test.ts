// PostgreSQL-specific tests on a real server: row locks across pools and processes, retries, migrations,
// error codes. What every substrate shares is in postgres.contract.test.ts; nothing here is mocked.
import { execFileSync, spawn } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import type { BudgetAccount, ChainEntryRecord, HitlRequest, SessionRecord, Substrate } from "@leash/core";
import { SubstrateError } from "@leash/core";
import { spendIn } from "@leash/substrate-contract";
// Not in package.json: @leash/test-stores depends on this package, and turbo refuses the cycle a
// devDependency back would make; tests resolve it through the root vitest config's alias to its source.
import { storeAtVersion } from "@leash/test-stores";
import { Pool } from "pg";
import { describe, expect, it } from "vitest";
import { account, DB_URL, pgHarness, reservation, session, T0 } from "../test/support.js";
import { tableNames } from "./codec.js";
import { LATEST_SCHEMA_VERSION, openPostgresSubstrate, type PostgresSubstrate } from "./index.js";
import { MIGRATIONS, runMigrations } from "./migrations.js";
import { buildStatements } from "./sql.js";

/** A real epoch-nanosecond clock reading: an integral double above 2^53 (2026-11-30). */
const EPOCH_NS = 1_796_012_406_975_000_000;
const { admin, freshSchema, track } = pgHarness("leash_pgtest");

async function open(schema: string, extra: { maxRetries?: number; poolSize?: number } = {}) {
  return track(await openPostgresSubstrate({ url: DB_URL, schema, ...extra }));
}

async function openMigrated(schema: string, extra: { maxRetries?: number; poolSize?: number } = {}) {
  const substrate = await open(schema, extra);
  await substrate.migrate();
  return substrate;
}

const hitl = (id: string, over: Partial<HitlRequest> = {}): HitlRequest => ({
  request_id: id,
  session_id: "s1",
  call_number: 1,
  tool_name: "transfer",
  nonce: 7,
  args_digest: null,
  reason: "hitl_all_calls",
  status: "PENDING",
  decision: null,
  operator_id: null,
  successor_nonce: null,
  successor_args_digest: null,
  created_ns: T0,
  decided_ns: null,
  params_json: null,
  budget_spent_usd: null,
  budget_limit_usd: null,
  budget_remaining_usd: null,
  policy_id: null,
  expires_ns: null,
  comment: null,
  successor_params_json: null,
  ...over,
});

const ZEROS = "0".repeat(64);

/** A chain entry; the store does not check hashes, so a recognizable fake hash per seq will do. */
const entry = (seq: number, prevHash: string, over: Partial<ChainEntryRecord> = {}): ChainEntryRecord => ({
  seq,
  entry_id: `e-${seq}`,
  entry_hash: seq.toString(16).padStart(64, "a"),
  prev_hash: prevHash,
  body: `{"seq":${seq},"b":1,"a":1.0}`,
  signature: "sig",
  key_id: "k1",
  kind: "decision",
  session_id: "s1",
  created_ns: EPOCH_NS,
  ...over,
});

async function rejection(promise: Promise<unknown>): Promise<SubstrateError> {
  const error = await promise.then(
    () => expect.fail("expected a rejection"),
    (e: unknown) => e,
  );
  expect(SubstrateError.isInstance(error), `expected a SubstrateError, got ${String(error)}`).toBe(true);
  return error as SubstrateError;
}

/** Adds 1 to an account's integer spent_usd, yielding between the locked read and the write. */
function increment(substrate: Substrate, accountId: string): Promise<number> {
  return substrate.transaction(async (tx) => {
    const row = (await tx.budgets.getAccount(accountId))!;
    await new Promise((resolve) => setTimeout(resolve, 0));
    const next = BigInt(row.spent_usd) + 1n;
    await tx.budgets.updateAccount({ ...row, spent_usd: String(next) });
    return Number(next);
  });
}

describe("query plans", () => {
  it("nonces.hasEach probes the indexes even as planned on an empty chain (no scan of the whole chain)", async () => {
    const schema = freshSchema();
    await openMigrated(schema);
    const { text } = buildStatements(tableNames(schema)).nonces.hasEach;
    const client = await admin.connect();
    try {
      // An empty chain is when a new store first plans it (a prepared statement may keep that plan).
      for (const mode of ["force_custom_plan", "force_generic_plan"]) {
        await client.query(`SET plan_cache_mode = ${mode}`);
        await client.query(`PREPARE has_each_${mode}(text[], text[]) AS ${text}`);
        const { rows } = await client.query(
          `EXPLAIN (FORMAT JSON) EXECUTE has_each_${mode}(ARRAY['s1', 's2'], ARRAY['"n1"', '7'])`,
        );
        const chainScans: string[] = [];
        const walk = (node: Record<string, unknown>) => {
          if (node["Relation Name"] === "leash_chain") chainScans.push(String(node["Node Type"]));
          for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
        };
        walk(rows[0]["QUERY PLAN"][0].Plan);
        expect(chainScans.length, mode).toBeGreaterThan(0);
        expect(
          chainScans.every((type) => type.startsWith("Index")),
          `${mode}: ${chainScans}`,
        ).toBe(true);
      }
    } finally {
      client.release();
    }
  });
});

describe("row locks", () => {
  it("100 concurrent get → update increments over two pools lose no update", {
    timeout: 30_000,
  }, async () => {
    const schema = freshSchema();
    const a = await openMigrated(schema);
    const b = await openMigrated(schema);
    await a.transaction((tx) => tx.budgets.insertAccount(account("hot")));
    const seen = await Promise.all(Array.from({ length: 100 }, (_, i) => increment(i % 2 ? a : b, "hot")));
    // Each transaction read a different predecessor: the writes happened one after another.
    expect(seen.sort((x, y) => x - y)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
    expect((await b.transaction((tx) => tx.budgets.getAccount("hot")))?.spent_usd).toBe("100");
  });

  it("exactly one of 50 concurrent transactions over two pools spends a nonce; the rest fail with conflict", {
    timeout: 30_000,
  }, async () => {
    const schema = freshSchema();
    const [a, b] = [await openMigrated(schema), await openMigrated(schema)];
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, (_, i) =>
        (i % 2 ? a : b).transaction(async (tx) => {
          // Half of them ask first, as the engine does (their append may then go out unanswered).
          if (i % 4 < 2) await tx.nonces.has("s1", "n-race");
          await new Promise((resolve) => setTimeout(resolve, i % 3));
          return spendIn(tx, "s1", "n-race");
        }),
      ),
    );
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    for (const r of results) {
      if (r.status === "rejected") expect((r.reason as SubstrateError).code).toBe("conflict");
    }
    expect(await a.transaction((tx) => tx.nonces.count("s1"))).toBe(1);
    expect(await a.transaction((tx) => tx.chain.count())).toBe(1);
  });

  it("a locked get that finds nothing keeps the id absent: a concurrent insert waits for it", async () => {
    const schema = freshSchema();
    const [a, b] = [await openMigrated(schema), await openMigrated(schema)];
    const events: string[] = [];
    let seenAbsent!: () => void;
    const absent = new Promise<void>((resolve) => {
      seenAbsent = resolve;
    });
    const reader = a.transaction(async (tx) => {
      const found = await tx.sessions.get("s-new");
      seenAbsent();
      await new Promise((resolve) => setTimeout(resolve, 200));
      events.push("reader commits");
      return found;
    });
    await absent;
    const writer = b.transaction(async (tx) => {
      await tx.sessions.insert(session("s-new"));
      events.push("writer inserted");
    });
    expect(await reader).toBeNull();
    await writer;
    expect(events).toEqual(["reader commits", "writer inserted"]);
  });

  it("a locked get of an id another transaction is inserting waits, then sees the committed row", async () => {
    const schema = freshSchema();
    const [a, b] = [await openMigrated(schema), await openMigrated(schema)];
    let inserted!: () => void;
    const pending = new Promise<void>((resolve) => {
      inserted = resolve;
    });
    const writer = a.transaction(async (tx) => {
      await tx.hitl.insert(hitl("h-new"));
      inserted();
      await new Promise((resolve) => setTimeout(resolve, 200));
    });
    await pending;
    const seen = await b.transaction((tx) => tx.hitl.get("h-new"));
    await writer;
    expect(seen).toEqual(hitl("h-new"));
  });

  it("store calls fn makes at once run one after another on the connection, without pg's queue warning", async () => {
    const sub = await openMigrated(freshSchema());
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.message);
    process.on("warning", onWarning);
    try {
      const results = await sub.transaction((tx) =>
        Promise.all([
          tx.sessions.insert(session("s1")),
          tx.chain.append(entry(0, ZEROS, { nonce: "n1" })),
          tx.budgets.insertAccount(account("a")),
          tx.sessions.get("s1"),
          tx.nonces.count("s1"),
        ]),
      );
      expect(results.slice(1)).toEqual([undefined, undefined, session("s1"), 1]);
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.filter((m) => /client\.query/.test(m))).toEqual([]);
    } finally {
      process.off("warning", onWarning);
    }
  });

  it("a nonce spent by a transaction that rolls back can be spent again", async () => {
    const sub = await openMigrated(freshSchema());
    const boom = new Error("boom");
    await expect(
      sub.transaction(async (tx) => {
        expect(await tx.nonces.has("s1", "n")).toBe(false);
        await spendIn(tx, "s1", "n");
        expect(await tx.nonces.has("s1", "n")).toBe(true);
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect((await sub.transaction((tx) => spendIn(tx, "s1", "n"))).seq).toBe(0);
    expect(await sub.transaction((tx) => tx.nonces.count("s1"))).toBe(1);
  });

  it("4 child processes doing 100 increments and appends each end at exactly 400, with a gapless chain", {
    timeout: 120_000,
  }, async () => {
    const root = fileURLToPath(new URL("..", import.meta.url));
    const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
    // The workers import the compiled package, so build it from the current source first.
    try {
      execFileSync(process.execPath, [tsc, "-p", root, "--pretty", "false"], { stdio: "pipe" });
    } catch (error) {
      const output = String((error as { stdout?: unknown }).stdout ?? "");
      throw new Error(`building dist for the worker processes failed:\n${output}`, { cause: error });
    }
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    await sub.transaction((tx) => tx.budgets.insertAccount(account("shared")));
    const worker = fileURLToPath(new URL("./multiprocess.worker.mjs", import.meta.url));
    const exits = await Promise.all(
      Array.from(
        { length: 4 },
        () =>
          new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
            const child = spawn(process.execPath, [worker, DB_URL, schema, "shared", "100"], {
              stdio: ["ignore", "ignore", "pipe"],
            });
            let stderr = "";
            child.stderr.on("data", (chunk) => {
              stderr += String(chunk);
            });
            child.on("error", reject);
            child.on("close", (code) => resolve({ code, stderr }));
          }),
      ),
    );
    expect(exits).toEqual(Array.from({ length: 4 }, () => ({ code: 0, stderr: "" })));
    expect((await sub.transaction((tx) => tx.budgets.getAccount("shared")))?.spent_usd).toBe("400");
    const chain = await sub.transaction((tx) => tx.chain.range(0, 1000));
    expect(chain.map((e) => e.seq)).toEqual(Array.from({ length: 400 }, (_, i) => i));
    for (const [i, e] of chain.entries())
      expect(e.prev_hash).toBe(i === 0 ? ZEROS : chain[i - 1]!.entry_hash);
  });
});

describe("chain head and outbox leases", () => {
  it("head() holds the head row: a second appender's head() waits for the first's commit, then sees its entry", async () => {
    const schema = freshSchema();
    const [a, b] = [await openMigrated(schema), await openMigrated(schema)];
    const events: string[] = [];
    let headRead!: () => void;
    const locked = new Promise<void>((resolve) => {
      headRead = resolve;
    });
    const first = a.transaction(async (tx) => {
      const head = await tx.chain.head();
      headRead();
      await new Promise((resolve) => setTimeout(resolve, 200));
      await tx.chain.append(entry(0, ZEROS));
      events.push("first appends and commits");
      return head;
    });
    await locked;
    const second = b.transaction(async (tx) => {
      const head = await tx.chain.head();
      events.push("second read the head");
      await tx.chain.append(entry(head!.seq + 1, head!.entry_hash));
      return head;
    });
    expect(await first).toBeNull();
    expect(await second).toEqual({ seq: 0, entry_hash: entry(0, ZEROS).entry_hash });
    expect(events).toEqual(["first appends and commits", "second read the head"]);
    const { rows } = await admin.query(`SELECT id, seq, entry_hash FROM "${schema}".leash_chain_head`);
    expect(rows).toEqual([{ id: 1, seq: "1", entry_hash: entry(1, "").entry_hash }]);
  });

  it("an append that did not read head() first still queues on the head row and conflicts instead of forking", async () => {
    const schema = freshSchema();
    const [a, b] = [await openMigrated(schema), await openMigrated(schema)];
    await a.transaction((tx) => tx.chain.append(entry(0, ZEROS)));
    let appended!: () => void;
    const holding = new Promise<void>((resolve) => {
      appended = resolve;
    });
    const first = a.transaction(async (tx) => {
      await tx.chain.append(entry(1, entry(0, ZEROS).entry_hash));
      appended();
      await new Promise((resolve) => setTimeout(resolve, 150));
    });
    await holding;
    // Same seq, different entry: it waits for the first to commit, then finds seq 1 taken.
    const error = await rejection(
      b.transaction((tx) => tx.chain.append(entry(1, entry(0, ZEROS).entry_hash, { entry_id: "rival" }))),
    );
    await first;
    expect(error.code).toBe("conflict");
    expect(error.message).toMatch(/seq 1 is taken/);
    expect((await b.transaction((tx) => tx.chain.range(0, 10))).map((e) => e.entry_id)).toEqual([
      "e-0",
      "e-1",
    ]);
  });

  it("stores body as text (not jsonb), byte for byte as given, and refuses U+0000 before the server sees it", async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    const body = '{"b":1,"a":1.0,"c":1e2,"ü":"😀"}';
    const code = await sub.transaction(async (tx) => {
      const refused = await tx.chain.append(entry(0, ZEROS, { body: "a\u0000b" })).catch((e) => e.code);
      // Refused client-side, so the transaction is still good.
      await tx.chain.append(entry(0, ZEROS, { body }));
      return refused;
    });
    expect(code).toBe("corrupt");
    const { rows } = await admin.query(
      `SELECT data_type FROM information_schema.columns
       WHERE table_schema = $1 AND table_name = 'leash_chain' AND column_name = 'body'`,
      [schema],
    );
    expect(rows).toEqual([{ data_type: "text" }]);
    const stored = await admin.query(
      `SELECT body, encode(convert_to(body, 'UTF8'), 'hex') AS hex FROM "${schema}".leash_chain`,
    );
    expect(stored.rows[0].body).toBe(body);
    expect(stored.rows[0].hex).toBe(Buffer.from(body, "utf8").toString("hex"));
  });

  it('a missing head row is reported as "corrupt", not as an empty chain', async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    await admin.query(`DELETE FROM "${schema}".leash_chain_head`);
    expect((await rejection(sub.transaction((tx) => tx.chain.head()))).code).toBe("corrupt");
    expect((await rejection(sub.transaction((tx) => tx.chain.append(entry(0, ZEROS))))).code).toBe("corrupt");
    expect(await sub.transaction((tx) => tx.chain.count())).toBe(0);
  });

  it("claim skips rows another relay's open claim has locked instead of waiting for it (SKIP LOCKED)", async () => {
    const schema = freshSchema();
    const [a, b] = [await openMigrated(schema), await openMigrated(schema)];
    await a.transaction(async (tx) => {
      for (let seq = 0; seq < 6; seq++)
        await tx.outbox.enqueue({ seq, entry_id: `e-${seq}`, session_id: null, created_ns: T0 });
    });
    let claimed!: () => void;
    let release!: () => void;
    const holding = new Promise<void>((resolve) => {
      claimed = resolve;
    });
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const slow = a.transaction(async (tx) => {
      const items = await tx.outbox.claim({ relayId: "relay-a", limit: 3, nowNs: T0, leaseNs: 1e9 });
      claimed();
      await released;
      return items.map((i) => i.seq);
    });
    await holding;
    // relay-a's transaction is still open: without SKIP LOCKED this would wait for it (and then deadlock the test).
    const fast = await b.transaction(async (tx) =>
      (await tx.outbox.claim({ relayId: "relay-b", limit: 10, nowNs: T0, leaseNs: 1e9 })).map((i) => i.seq),
    );
    release();
    expect(fast).toEqual([3, 4, 5]);
    expect(await slow).toEqual([0, 1, 2]);
    const { rows } = await admin.query(
      `SELECT seq, claimed_by, attempts FROM "${schema}".leash_outbox ORDER BY seq`,
    );
    expect(rows.map((r) => [Number(r.seq), r.claimed_by, r.attempts])).toEqual([
      [0, "relay-a", 1],
      [1, "relay-a", 1],
      [2, "relay-a", 1],
      [3, "relay-b", 1],
      [4, "relay-b", 1],
      [5, "relay-b", 1],
    ]);
  });
});

describe("retries", () => {
  /** Installs a trigger that raises `sqlstate` the first `times` times it fires (a sequence survives rollback). */
  async function failTimes(schema: string, table: string, times: number, deferred = false) {
    await admin.query(`CREATE SEQUENCE "${schema}".fail_seq`);
    await admin.query(`CREATE FUNCTION "${schema}".fail_first() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('"${schema}".fail_seq') <= ${times} THEN
    RAISE EXCEPTION 'forced serialization failure' USING ERRCODE = '40001';
  END IF;
  RETURN NEW;
END $$`);
    await admin.query(
      deferred
        ? `CREATE CONSTRAINT TRIGGER fail_first AFTER INSERT ON "${schema}".${table}
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "${schema}".fail_first()`
        : `CREATE TRIGGER fail_first BEFORE UPDATE ON "${schema}".${table}
FOR EACH ROW EXECUTE FUNCTION "${schema}".fail_first()`,
    );
  }

  it("retries the whole fn after SQLSTATE 40001 and commits once", async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    await sub.transaction((tx) => tx.budgets.insertAccount(account("a")));
    await failTimes(schema, "leash_budget_accounts", 2);
    let calls = 0;
    const result = await sub.transaction(async (tx) => {
      calls++;
      await spendIn(tx, "s1", "n-retry");
      const row = (await tx.budgets.getAccount("a"))!;
      await tx.budgets.updateAccount({ ...row, spent_usd: "1" });
      return "done";
    });
    expect({ result, calls }).toEqual({ result: "done", calls: 3 });
    const after = await sub.transaction(async (tx) => ({
      spent: (await tx.budgets.getAccount("a"))?.spent_usd,
      nonces: await tx.nonces.count("s1"),
    }));
    expect(after).toEqual({ spent: "1", nonces: 1 });
  });

  it("retries even when fn catches the serialization failure and returns normally", async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    await sub.transaction((tx) => tx.budgets.insertAccount(account("a")));
    await failTimes(schema, "leash_budget_accounts", 1);
    let calls = 0;
    const outcome = await sub.transaction(async (tx) => {
      calls++;
      const row = (await tx.budgets.getAccount("a"))!;
      try {
        await tx.budgets.updateAccount({ ...row, spent_usd: "5" });
        return "updated";
      } catch {
        return "swallowed";
      }
    });
    expect({ outcome, calls }).toEqual({ outcome: "updated", calls: 2 });
  });

  it("retries a serialization failure raised at COMMIT (deferred trigger)", async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    await failTimes(schema, "leash_chain", 1, true);
    let calls = 0;
    const spent = await sub.transaction(async (tx) => {
      calls++;
      return (await spendIn(tx, "s1", "n-commit")).seq;
    });
    expect({ spent, calls }).toEqual({ spent: 0, calls: 2 });
    expect(await sub.transaction((tx) => tx.nonces.count("s1"))).toBe(1);
  });

  it('gives up after maxRetries with code "serialization", keeping the cause', async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema, { maxRetries: 2 });
    await sub.transaction((tx) => tx.budgets.insertAccount(account("a")));
    await failTimes(schema, "leash_budget_accounts", 1_000);
    let calls = 0;
    const error = await rejection(
      sub.transaction(async (tx) => {
        calls++;
        const row = (await tx.budgets.getAccount("a"))!;
        await tx.budgets.updateAccount({ ...row, spent_usd: "1" });
      }),
    );
    expect(error.code).toBe("serialization");
    expect(calls).toBe(3);
    const cause = error.cause as SubstrateError;
    expect(cause.code).toBe("serialization");
    expect((cause.cause as { code?: string }).code).toBe("40001");
  });

  it("a real deadlock (40P01) between two transactions is retried and both commit", {
    timeout: 30_000,
  }, async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    await sub.transaction(async (tx) => {
      await tx.budgets.insertAccount(account("x"));
      await tx.budgets.insertAccount(account("y"));
    });
    let locked = 0;
    let release!: () => void;
    const bothLocked = new Promise<void>((resolve) => {
      release = resolve;
    });
    let calls = 0;
    const crossing = (first: string, second: string) =>
      sub.transaction(async (tx) => {
        const attempt = ++calls;
        const one = (await tx.budgets.getAccount(first))!;
        if (attempt <= 2) {
          // First attempts wait for each other, so each holds one row and asks for the other's.
          if (++locked === 2) release();
          await bothLocked;
        }
        const two = (await tx.budgets.getAccount(second))!;
        await tx.budgets.updateAccount({ ...one, spent_usd: String(Number(one.spent_usd) + 1) });
        await tx.budgets.updateAccount({ ...two, spent_usd: String(Number(two.spent_usd) + 1) });
      });
    await Promise.all([crossing("x", "y"), crossing("y", "x")]);
    expect(calls).toBe(3);
    const spent = await sub.transaction(async (tx) => [
      (await tx.budgets.getAccount("x"))?.spent_usd,
      (await tx.budgets.getAccount("y"))?.spent_usd,
    ]);
    expect(spent).toEqual(["2", "2"]);
  });
});

/** Integers as exact decimal text: a double above 2^53 keeps its value (String() would shorten it). */
const int = (n: number | null) => (n === null ? null : BigInt(n).toString());

/**
 * Writes a session or account row with the columns versions 1 to 5 gave its table (no at_seq), behind
 * the store's back: the store itself now writes the stamps.
 */
async function insertAsVersion5(schema: string, row: SessionRecord | BudgetAccount): Promise<void> {
  if ("session_id" in row) {
    await admin.query(
      `INSERT INTO "${schema}".leash_sessions (session_id, agent_id, organization_id, status, config, state,
         call_count, created_ns, updated_ns, last_heartbeat_ns) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
      [
        row.session_id,
        row.agent_id,
        row.organization_id,
        row.status,
        JSON.stringify(row.config),
        JSON.stringify(row.state),
        int(row.call_count),
        int(row.created_ns),
        int(row.updated_ns),
        int(row.last_heartbeat_ns),
      ],
    );
    return;
  }
  await admin.query(
    `INSERT INTO "${schema}".leash_budget_accounts (account_id, scope, parent_id, limit_usd, spent_usd,
       reserved_usd, created_ns, updated_ns) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [
      row.account_id,
      row.scope,
      row.parent_id,
      row.limit_usd,
      row.spent_usd,
      row.reserved_usd,
      int(row.created_ns),
      int(row.updated_ns),
    ],
  );
}

describe("migrations", () => {
  it("migrates a version-1 schema forward, keeping its data", async () => {
    const schema = freshSchema();
    const names = tableNames(schema);
    const client = await admin.connect();
    try {
      expect(await runMigrations(client, names, 1)).toEqual({ from: 0, to: 1 });
    } finally {
      client.release();
    }
    const sub = await open(schema);
    // Sessions and accounts as version 1 laid them out (the store now writes the stamps version 6 added).
    await insertAsVersion5(
      schema,
      session("s1", { state: { total_calls: 3, repeat_counts: { search: 2 } } }),
    );
    await insertAsVersion5(schema, account("a", { spent_usd: "0.001" }));
    // A hold as version 1 laid it out (version 13 added its stamp).
    const hold = reservation("r1");
    await admin.query(
      `INSERT INTO "${schema}".leash_reservations (reservation_id, account_ids, session_id, call_number, amount_usd,
         actual_usd, status, idempotency_key, created_ns, expires_ns, resolved_ns)
       VALUES ($1, $2::text[], $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
      [
        hold.reservation_id,
        hold.account_ids,
        hold.session_id,
        int(hold.call_number),
        hold.amount_usd,
        hold.actual_usd,
        hold.status,
        hold.idempotency_key,
        int(hold.created_ns),
        int(hold.expires_ns),
        hold.resolved_ns === null ? null : int(hold.resolved_ns),
      ],
    );
    // A nonce as versions 1–6 recorded it.
    await admin.query(`INSERT INTO "${schema}".leash_nonces VALUES ('s1', '"n1"', ${T0})`);
    const hitlBefore = await rejection(sub.transaction((tx) => tx.hitl.list({})));
    expect(hitlBefore.code).toBe("corrupt");
    expect(hitlBefore.message).toMatch(/migrate\(\)/);

    await sub.migrate();
    const versions = await admin.query(
      `SELECT version FROM "${schema}".leash_schema_version ORDER BY version`,
    );
    expect(versions.rows.map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version));
    // The last migration's number (versions only increase; parallel work takes some out of order).
    expect(LATEST_SCHEMA_VERSION).toBe(MIGRATIONS[MIGRATIONS.length - 1]!.version);
    const kept = await sub.transaction(async (tx) => ({
      session: await tx.sessions.get("s1"),
      nonce: await tx.nonces.has("s1", "n1"),
      account: await tx.budgets.getAccount("a"),
      expired: await tx.budgets.listExpired(T0 + 1000, 10),
    }));
    expect(kept).toEqual({
      // Rows written before the stamps existed read back with at_seq null.
      session: session("s1", { state: { total_calls: 3, repeat_counts: { search: 2 } }, at_seq: null }),
      nonce: true,
      account: account("a", { spent_usd: "0.001", at_seq: null }),
      expired: [reservation("r1")],
    });
    await sub.transaction((tx) => tx.hitl.insert(hitl("h1")));
    expect(await sub.transaction((tx) => tx.hitl.get("h1"))).toEqual(hitl("h1"));
  });

  it("migrates a version-2 schema holding data to the latest version: rows kept, an empty chain with its head row", async () => {
    const schema = freshSchema();
    const names = tableNames(schema);
    const client = await admin.connect();
    try {
      expect(await runMigrations(client, names, 2)).toEqual({ from: 0, to: 2 });
    } finally {
      client.release();
    }
    const sub = await open(schema);
    await insertAsVersion5(schema, session("s1", { created_ns: EPOCH_NS }));
    await insertAsVersion5(schema, account("a", { spent_usd: "0.001" }));
    await admin.query(`INSERT INTO "${schema}".leash_nonces VALUES ('s1', '7', ${T0})`);
    // Written as version 2 laid the table out (the store now writes the columns version 5 added).
    await admin.query(
      `INSERT INTO "${schema}".leash_hitl_requests VALUES ('h1', 's1', 1, 'transfer', '"7"', NULL, 'hitl_all_calls',
         'PENDING', NULL, NULL, NULL, NULL, ${T0}, NULL)`,
    );
    const chainBefore = await rejection(sub.transaction((tx) => tx.chain.head()));
    expect(chainBefore.code).toBe("corrupt");
    expect(chainBefore.message).toMatch(/migrate\(\)/);

    await sub.migrate();
    const versions = await admin.query(
      `SELECT version FROM "${schema}".leash_schema_version ORDER BY version`,
    );
    expect(versions.rows.map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version));
    const head = await admin.query(`SELECT id, seq, entry_hash FROM "${schema}".leash_chain_head`);
    expect(head.rows).toEqual([{ id: 1, seq: null, entry_hash: null }]);
    // Version 3 made the per-session indexes of the chain and the outbox; version 4 dropped them;
    // version 7 added the unique index of spent nonces.
    const indexes = await admin.query(
      "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename IN ('leash_chain', 'leash_outbox') ORDER BY indexname",
      [schema],
    );
    expect(indexes.rows.map((r) => r.indexname)).toEqual([
      "leash_chain_entry_id_key",
      "leash_chain_nonces",
      "leash_chain_pkey",
      "leash_outbox_claim",
      "leash_outbox_pkey",
    ]);
    const kept = await sub.transaction(async (tx) => ({
      session: await tx.sessions.get("s1"),
      nonces: [await tx.nonces.has("s1", 7), await tx.nonces.has("s1", "7")],
      account: await tx.budgets.getAccount("a"),
      hitl: await tx.hitl.get("h1"),
      head: await tx.chain.head(),
      outbox: await tx.outbox.counts(),
    }));
    expect(kept).toEqual({
      session: session("s1", { created_ns: EPOCH_NS, at_seq: null }),
      nonces: [true, false],
      account: account("a", { spent_usd: "0.001", at_seq: null }),
      hitl: hitl("h1", { nonce: "7" }),
      head: null,
      outbox: { PENDING: 0, DELIVERED: 0, DEAD: 0 },
    });
    await sub.transaction(async (tx) => {
      await tx.chain.append(entry(0, ZEROS));
      await tx.outbox.enqueue({ seq: 0, entry_id: "e-0", session_id: "s1", created_ns: EPOCH_NS });
    });
    expect(await sub.transaction((tx) => tx.chain.range(0, 10))).toEqual([entry(0, ZEROS)]);
    // Migrating again neither re-creates the head row nor resets it.
    await sub.migrate();
    expect(await sub.transaction((tx) => tx.chain.head())).toEqual({
      seq: 0,
      entry_hash: entry(0, ZEROS).entry_hash,
    });
  });

  it("migrates a version-4 schema with a pending HITL request: kept, with no content and no expiry", async () => {
    const schema = freshSchema();
    const names = tableNames(schema);
    const client = await admin.connect();
    try {
      expect(await runMigrations(client, names, 4)).toEqual({ from: 0, to: 4 });
    } finally {
      client.release();
    }
    await admin.query(
      `INSERT INTO "${schema}".leash_hitl_requests VALUES ('h-v4', 's1', 1, 'transfer', '7', NULL, 'hitl_all_calls',
         'PENDING', NULL, NULL, NULL, NULL, ${T0}, NULL)`,
    );
    const sub = await open(schema);
    await sub.migrate();
    const kept = await sub.transaction((tx) => tx.hitl.list({ status: "PENDING" }));
    expect(kept).toEqual([hitl("h-v4")]);
    const answered = hitl("h-v4", {
      status: "DECIDED",
      decision: "reject",
      operator_id: "alice",
      comment: "not today",
      decided_ns: T0 + 5,
    });
    await sub.transaction((tx) => tx.hitl.update(answered));
    expect(await sub.transaction((tx) => tx.hitl.get("h-v4"))).toEqual(answered);
  });

  it("migrates a version-6 schema (the last without the nonce column) with nonce rows and entries: old nonces still count as spent and are refused again", async () => {
    const schema = freshSchema();
    const names = tableNames(schema);
    const client = await admin.connect();
    try {
      expect(await runMigrations(client, names, 6)).toEqual({ from: 0, to: 6 });
    } finally {
      client.release();
    }
    // What a version-6 engine wrote for two ALLOWs: a nonce row each, and entries without a nonce column.
    await admin.query(`INSERT INTO "${schema}".leash_nonces VALUES ('s1', '7', ${T0}), ('s1', '"a"', ${T0})`);
    for (const e of [entry(0, ZEROS), entry(1, entry(0, ZEROS).entry_hash)]) {
      await admin.query(
        `INSERT INTO "${schema}".leash_chain VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
        [
          e.seq,
          e.entry_id,
          e.entry_hash,
          e.prev_hash,
          e.body,
          e.signature,
          e.key_id,
          e.kind,
          e.session_id,
          e.created_ns,
        ],
      );
    }
    await admin.query(`UPDATE "${schema}".leash_chain_head SET seq = 1, entry_hash = $1`, [
      entry(1, entry(0, ZEROS).entry_hash).entry_hash,
    ]);
    const sub = await open(schema);
    await sub.migrate();
    const versions = await admin.query(
      `SELECT version FROM "${schema}".leash_schema_version ORDER BY version`,
    );
    expect(versions.rows.map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version));
    const seen = await sub.transaction(async (tx) => ({
      has: [
        await tx.nonces.has("s1", 7),
        await tx.nonces.has("s1", "a"),
        await tx.nonces.has("s1", "7"),
        await tx.nonces.has("s2", 7),
      ],
      count: await tx.nonces.count("s1"),
      // The old entries read back as they were written: without a nonce.
      entries: (await tx.chain.range(0, 10)).map((e) => [e.seq, "nonce" in e]),
    }));
    expect(seen).toEqual({
      has: [true, true, false, false],
      count: 2,
      entries: [
        [0, false],
        [1, false],
      ],
    });
    // A nonce of the old table is spent: appending it again is refused and appends nothing, whether
    // the transaction asked first (its append then goes out unanswered) or not.
    for (const nonce of [7, "a"]) {
      const error = await rejection(sub.transaction((tx) => spendIn(tx, "s1", nonce)));
      expect([error.code, error.message]).toEqual(["conflict", expect.stringContaining("already spent")]);
      const asked = await rejection(
        sub.transaction(async (tx) => {
          await tx.nonces.has("s1", nonce);
          return spendIn(tx, "s1", nonce);
        }),
      );
      expect(asked.code).toBe("conflict");
    }
    expect(await sub.transaction((tx) => tx.chain.count())).toBe(2);
    // The string "7" is another nonce; once spent on an entry, it is refused there too.
    expect((await sub.transaction((tx) => spendIn(tx, "s1", "7"))).seq).toBe(2);
    expect((await rejection(sub.transaction((tx) => spendIn(tx, "s1", "7")))).code).toBe("conflict");
    const after = await sub.transaction(async (tx) => ({
      has: await tx.nonces.has("s1", "7"),
      count: await tx.nonces.count("s1"),
      entries: await tx.chain.count(),
    }));
    expect(after).toEqual({ has: true, count: 3, entries: 3 });
  });

  it("is idempotent and safe from 6 handles at once on an empty schema", { timeout: 30_000 }, async () => {
    const schema = freshSchema();
    const handles = await Promise.all(Array.from({ length: 6 }, () => open(schema, { poolSize: 2 })));
    await Promise.all(handles.flatMap((h) => [h.migrate(), h.migrate()]));
    await handles[0]!.migrate();
    const { rows } = await admin.query(
      `SELECT version FROM "${schema}".leash_schema_version ORDER BY version`,
    );
    expect(rows.map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version));
    const heads = await admin.query(`SELECT count(*)::int AS n FROM "${schema}".leash_chain_head`);
    expect(heads.rows).toEqual([{ n: 1 }]);
    await handles[1]!.transaction((tx) => tx.sessions.insert(session("s1")));
    expect(await handles[5]!.transaction((tx) => tx.sessions.get("s1"))).toEqual(session("s1"));
  });

  it('refuses a schema newer than this build with "corrupt"', async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    await admin.query(
      `INSERT INTO "${schema}".leash_schema_version (version, description) VALUES (99, 'future')`,
    );
    const error = await rejection(sub.migrate());
    expect(error.code).toBe("corrupt");
    expect(error.message).toMatch(/newer/);
  });
});

describe("error codes", () => {
  it('duplicate inserts fail with "conflict" without aborting the transaction', async () => {
    const sub = await openMigrated(freshSchema());
    await sub.transaction(async (tx) => {
      await tx.sessions.insert(session("s1"));
      await tx.budgets.insertAccount(account("a"));
      await tx.budgets.insertReservation(reservation("r1"));
      await tx.hitl.insert(hitl("h1"));
    });
    const codes = await sub.transaction(async (tx) => {
      const caught: string[] = [];
      for (const attempt of [
        () => tx.sessions.insert(session("s1")),
        () => tx.budgets.insertAccount(account("a")),
        () => tx.budgets.insertReservation(reservation("r1")),
        () => tx.hitl.insert(hitl("h1")),
      ]) {
        await attempt().catch((e: SubstrateError) => caught.push(e.code));
      }
      // PostgreSQL aborts a transaction on a failed statement; these must not have been one.
      await tx.sessions.insert(session("s2"));
      return caught;
    });
    expect(codes).toEqual(["conflict", "conflict", "conflict", "conflict"]);
    expect(await sub.transaction((tx) => tx.sessions.get("s2"))).toEqual(session("s2"));
  });

  it('updates of unknown ids fail with "not_found"', async () => {
    const sub = await openMigrated(freshSchema());
    const codes = await Promise.all(
      [
        (tx: Parameters<Parameters<Substrate["transaction"]>[0]>[0]) => tx.sessions.update(session("x")),
        (tx: Parameters<Parameters<Substrate["transaction"]>[0]>[0]) =>
          tx.budgets.updateAccount(account("x")),
        (tx: Parameters<Parameters<Substrate["transaction"]>[0]>[0]) =>
          tx.budgets.updateReservation(reservation("x")),
        (tx: Parameters<Parameters<Substrate["transaction"]>[0]>[0]) => tx.hitl.update(hitl("x")),
      ].map(async (write) => (await rejection(sub.transaction(write))).code),
    );
    expect(codes).toEqual(["not_found", "not_found", "not_found", "not_found"]);
  });

  it("a statement error fn swallows still fails the transaction, and nothing commits", async () => {
    const sub = await openMigrated(freshSchema());
    const error = await rejection(
      sub.transaction(async (tx) => {
        await tx.sessions.insert(session("s1"));
        // U+0000 cannot be stored in JSONB: the server rejects the statement and aborts the transaction.
        await tx.sessions
          .insert(session("s2", { state: { last_tool_name: "a\u0000b" } }))
          .catch(() => undefined);
        return "pretend all is well";
      }),
    );
    expect(error.code).toBe("corrupt");
    expect(await sub.transaction((tx) => tx.sessions.get("s1"))).toBeNull();
  });

  it('an unreachable server fails with "io", keeping the cause', async () => {
    const error = await rejection(openPostgresSubstrate({ url: "postgres://postgres@127.0.0.1:1/test" }));
    expect(error.code).toBe("io");
    expect(error.message).toMatch(/127\.0\.0\.1:1\/test/);
    expect((error.cause as { code?: string }).code).toBe("ECONNREFUSED");
  });

  it('a connection killed mid-transaction fails with "io"; the handle then works again', async () => {
    const schema = freshSchema();
    const app = `leash_io_${process.pid}_${Date.now().toString(36)}`;
    const pool = new Pool({ connectionString: DB_URL, max: 2, application_name: app });
    try {
      const sub = await openPostgresSubstrate({ pool, schema });
      await sub.migrate();
      const error = await rejection(
        sub.transaction(async (tx) => {
          await tx.sessions.insert(session("s1"));
          await admin.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND state <> 'idle'",
            [app],
          );
          await tx.sessions.get("s1");
        }),
      );
      expect(error.code).toBe("io");
      expect(await sub.transaction((tx) => tx.sessions.get("s1"))).toBeNull();
      await sub.close();
      // The pool was the caller's: close() left it open.
      expect((await pool.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    } finally {
      await pool.end();
    }
  });

  it('a closed handle rejects with "closed", and stores used after their transaction do too', async () => {
    const sub = await openMigrated(freshSchema());
    let escaped: Parameters<Parameters<Substrate["transaction"]>[0]>[0] | undefined;
    await sub.transaction(async (tx) => {
      escaped = tx;
    });
    expect((await rejection(escaped!.sessions.get("s1"))).code).toBe("closed");
    await sub.close();
    await sub.close();
    expect((await rejection(sub.transaction((tx) => tx.sessions.get("s1")))).code).toBe("closed");
    expect((await rejection(sub.migrate())).code).toBe("closed");
  });

  it('a schema that was never migrated fails with "corrupt" and says to migrate', async () => {
    const sub = await open(freshSchema());
    const error = await rejection(sub.transaction((tx) => tx.sessions.get("s1")));
    expect(error.code).toBe("corrupt");
    expect(error.message).toMatch(/migrate\(\)/);
  });
});

describe("values", () => {
  it("decimal strings come back verbatim, with an equal NUMERIC beside them for SQL", async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    const samples = ["1e-7", "+1", "0.0010", "-0", ".5", "1E+3", "12345678901234567890.123456789"];
    await sub.transaction(async (tx) => {
      for (const [i, d] of samples.entries())
        await tx.budgets.insertAccount(account(`d${i}`, { limit_usd: d }));
    });
    const back = await sub.transaction(async (tx) =>
      Promise.all(samples.map(async (_, i) => (await tx.budgets.getAccount(`d${i}`))?.limit_usd)),
    );
    expect(back).toEqual(samples);
    const { rows } = await admin.query(
      `SELECT account_id, limit_usd_num::text AS n FROM "${schema}".leash_budget_accounts ORDER BY account_id`,
    );
    expect(rows.map((r) => r.n)).toEqual([
      "0.0000001",
      "1",
      "0.0010",
      "0",
      "0.5",
      "1000",
      "12345678901234567890.123456789",
    ]);
  });

  it('rejects a non-decimal amount and a fractional or oversize timestamp with "corrupt", before the server sees them', async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    const codes = await sub.transaction(async (tx) => {
      const caught: string[] = [];
      await tx.budgets.insertAccount(account("a", { limit_usd: "1,5" })).catch((e) => caught.push(e.code));
      await tx.budgets.insertAccount(account("b", { limit_usd: "NaN" })).catch((e) => caught.push(e.code));
      await tx.sessions.insert(session("s", { created_ns: 1.5 })).catch((e) => caught.push(e.code));
      await tx.sessions.insert(session("t", { updated_ns: 2 ** 63 })).catch((e) => caught.push(e.code));
      // None reached PostgreSQL, so the transaction is still good.
      await tx.sessions.insert(session("ok", { created_ns: 2 ** 53, updated_ns: -(2 ** 53) }));
      await tx.sessions.insert(session("epoch", { created_ns: EPOCH_NS, updated_ns: 2 ** 63 - 1024 }));
      return caught;
    });
    expect(codes).toEqual(["corrupt", "corrupt", "corrupt", "corrupt"]);
    const ok = await sub.transaction((tx) => tx.sessions.get("ok"));
    expect([ok?.created_ns, ok?.updated_ns]).toEqual([2 ** 53, -(2 ** 53)]);
    const epoch = await sub.transaction((tx) => tx.sessions.get("epoch"));
    expect([epoch?.created_ns, epoch?.updated_ns]).toEqual([EPOCH_NS, 2 ** 63 - 1024]);
    // Stored as the double's exact integer value, so SQL sees what JavaScript sees.
    const { rows } = await admin.query(
      `SELECT created_ns::text AS ns FROM "${schema}".leash_sessions WHERE session_id = 'epoch'`,
    );
    expect(rows[0].ns).toBe(BigInt(EPOCH_NS).toString());
  });

  it("keeps nonces apart that a text column would merge: types, U+0000, lone surrogates", async () => {
    const sub = await openMigrated(freshSchema());
    const nonces = [7, "7", "a\u0000b", "a", "\ud800", "\ud801", "\ufffd", 1e21, "1e+21", -0.5];
    await sub.transaction(async (tx) => {
      for (const n of nonces) await spendIn(tx, "s1", n);
    });
    for (const n of nonces) {
      expect((await rejection(sub.transaction((tx) => spendIn(tx, "s1", n)))).code).toBe("conflict");
    }
    const back = await sub.transaction(async (tx) => ({
      has: await Promise.all(nonces.map((n) => tx.nonces.has("s1", n))),
      count: await tx.nonces.count("s1"),
      stored: (await tx.chain.range(0, 100)).map((e) => e.nonce),
    }));
    expect(back).toEqual({ has: nonces.map(() => true), count: nonces.length, stored: nonces });
    await sub.transaction((tx) => tx.hitl.insert(hitl("h", { nonce: "\ud800", successor_nonce: 1e21 })));
    const request = await sub.transaction((tx) => tx.hitl.get("h"));
    expect([request?.nonce, request?.successor_nonce]).toEqual(["\ud800", 1e21]);
  });

  it("two schemas on one caller's pool stay apart (prepared statement names included)", async () => {
    const pool = new Pool({ connectionString: DB_URL, max: 1 });
    try {
      const [s1, s2] = [freshSchema(), freshSchema()];
      const a = await openPostgresSubstrate({ pool, schema: s1 });
      const b = await openPostgresSubstrate({ pool, schema: s2, preparedStatements: false });
      await a.migrate();
      await b.migrate();
      await a.transaction((tx) => tx.sessions.insert(session("only-in-a")));
      await b.transaction((tx) => tx.sessions.insert(session("only-in-b")));
      const lists = await Promise.all(
        [a, b].map((s) => s.transaction(async (tx) => (await tx.sessions.list()).map((r) => r.session_id))),
      );
      expect(lists).toEqual([["only-in-a"], ["only-in-b"]]);
      await a.close();
      await b.close();
    } finally {
      await pool.end();
    }
  });
});

describe("pools", () => {
  it("works on a caller's pool with and without pipeline mode, whatever fn does first", async () => {
    for (const pipeline of [true, false]) {
      const pool = new Pool({ connectionString: DB_URL, max: 2, pipeline });
      try {
        const sub = await openPostgresSubstrate({ pool, schema: freshSchema() });
        await sub.migrate();
        // First statement a write (BEGIN must be confirmed first), then a read (may follow BEGIN at once).
        await sub.transaction((tx) => tx.sessions.insert(session("s1")));
        const read = await sub.transaction(async (tx) => {
          const found = await tx.sessions.get("s1");
          await tx.sessions.update({ ...found!, call_count: 1 });
          return tx.sessions.get("s1");
        });
        expect(read?.call_count).toBe(1);
        const boom = new Error("boom");
        await expect(
          sub.transaction(async (tx) => {
            await tx.nonces.has("s1", "n");
            await spendIn(tx, "s1", "n");
            throw boom;
          }),
        ).rejects.toBe(boom);
        expect(await sub.transaction((tx) => tx.nonces.count("s1"))).toBe(0);
        await sub.close();
      } finally {
        await pool.end();
      }
    }
  });

  it("without `schema`, tables go where the connection's search_path points", async () => {
    const schema = freshSchema();
    await admin.query(`CREATE SCHEMA "${schema}"`);
    const pool = new Pool({ connectionString: DB_URL, max: 2, options: `-c search_path=${schema}` });
    try {
      const sub = await openPostgresSubstrate({ pool });
      expect(sub.schema).toBeNull();
      await sub.migrate();
      await sub.migrate();
      await sub.transaction((tx) => tx.sessions.insert(session("s1")));
      const { rows } = await admin.query(`SELECT session_id FROM "${schema}".leash_sessions`);
      expect(rows).toEqual([{ session_id: "s1" }]);
      await sub.close();
    } finally {
      await pool.end();
    }
  });

  it("close() waits for running transactions, then refuses new ones", async () => {
    const sub = await openMigrated(freshSchema());
    const running = sub.transaction(async (tx) => {
      await new Promise((resolve) => setTimeout(resolve, 100));
      await tx.sessions.insert(session("late"));
      return "finished";
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    await sub.close();
    await expect(running).resolves.toBe("finished");
    expect((await rejection(sub.transaction(async () => undefined))).code).toBe("closed");
    const check = await openMigrated(sub.schema!);
    expect(await check.transaction((tx) => tx.sessions.get("late"))).toEqual(session("late"));
  });
});

describe("options", () => {
  it("rejects a bad schema name, both or neither of url and pool, and non-postgres URLs", async () => {
    await expect(openPostgresSubstrate({ url: DB_URL, schema: 'x"; DROP TABLE y; --' })).rejects.toThrow(
      TypeError,
    );
    await expect(openPostgresSubstrate({})).rejects.toThrow(/exactly one/);
    await expect(openPostgresSubstrate({ url: "mysql://localhost/x" })).rejects.toThrow(/postgres:\/\//);
    await expect(openPostgresSubstrate({ url: DB_URL, maxRetries: -1 })).rejects.toThrow(RangeError);
  });

  it("declares kind, capabilities and the port version", async () => {
    const sub: PostgresSubstrate = await open(freshSchema());
    expect([sub.kind, sub.capabilities, sub.specificationVersion]).toEqual([
      "postgres",
      { multiProcess: true, durable: true },
      "leash-substrate-v7",
    ]);
  });
});
describe("migrating a store written at version 5 (before the snapshot stamps)", () => {
  it("keeps every row of every table equal, with at_seq null on sessions and accounts", async () => {
    // Rows of every kind, written through the port into a current store, then copied into the v5
    // layout (the migrations as they stood at version 5, nothing after; the columns the two share), as
    // the build before this one would have written them.
    const sourceSchema = freshSchema();
    const source = await openMigrated(sourceSchema);
    const sessions = [
      session("s1", { last_heartbeat_ns: EPOCH_NS, created_ns: EPOCH_NS, at_seq: null }),
      session("s2", { status: "PAUSED", last_heartbeat_ns: null, call_count: 2, at_seq: null }),
    ];
    const accounts = [
      account("org", { scope: "organization", at_seq: null }),
      account("a", { parent_id: "org", spent_usd: "0.25", reserved_usd: "1e-7", at_seq: null }),
    ];
    const reservations = [
      reservation("r1", { account_ids: ["a", "org"] }),
      reservation("r2", { status: "SETTLED", actual_usd: "0.25", resolved_ns: EPOCH_NS }),
    ];
    const requests = [
      hitl("h1", { nonce: "n-7", params_json: '{"amount":10}', expires_ns: EPOCH_NS }),
      hitl("h2", {
        session_id: "s2",
        status: "DECIDED",
        decision: "modify",
        operator_id: "alice",
        successor_nonce: 8,
        successor_params_json: '{"amount":5}',
        decided_ns: T0 + 3,
      }),
    ];
    const chain = [entry(0, ZEROS)];
    chain.push(entry(1, chain[0]!.entry_hash), entry(2, "ab".repeat(32)));
    chain[2] = entry(2, chain[1]!.entry_hash);
    await source.transaction(async (tx) => {
      for (const s of sessions) await tx.sessions.insert(s);
      for (const a of accounts) await tx.budgets.insertAccount(a);
      for (const r of reservations) await tx.budgets.insertReservation(r);
      for (const h of requests) await tx.hitl.insert(h);
      for (const e of chain) {
        await tx.chain.append(e);
        await tx.outbox.enqueue({
          seq: e.seq,
          entry_id: e.entry_id,
          session_id: "s1",
          created_ns: e.created_ns,
        });
      }
    });
    await source.transaction((tx) =>
      tx.outbox.claim({ relayId: "relay-1", limit: 1, nowNs: T0, leaseNs: 1000 }),
    );
    const outbox = await source.transaction((tx) => tx.outbox.list({}));
    const schema = freshSchema();
    await storeAtVersion({ path: null, schema }, 5, { path: null, schema: sourceSchema });
    // The nonces a version-5 engine recorded: rows of leash_nonces (JSON text), not entry columns.
    await admin.query(`INSERT INTO "${schema}".leash_nonces VALUES ('s1', '7', ${T0}), ('s1', '"7"', ${T0})`);

    const sub = await open(schema);
    await sub.migrate();
    const versions = await admin.query(
      `SELECT version FROM "${schema}".leash_schema_version ORDER BY version`,
    );
    expect(versions.rows.map((r) => r.version)).toEqual(MIGRATIONS.map((m) => m.version));
    const after = await sub.transaction(async (tx) => ({
      sessions: await tx.sessions.list(),
      accounts: await Promise.all(accounts.map((a) => tx.budgets.getAccount(a.account_id))),
      reservations: await tx.budgets.listReservations({}),
      hitl: await tx.hitl.list({}),
      nonces: [await tx.nonces.has("s1", 7), await tx.nonces.has("s1", "7"), await tx.nonces.count("s1")],
      chain: await tx.chain.range(0, 10),
      head: await tx.chain.head(),
      outbox: await tx.outbox.list({}),
    }));
    expect(after).toEqual({
      sessions: [sessions[1], sessions[0]],
      accounts,
      reservations,
      hitl: requests,
      nonces: [true, true, 2],
      chain,
      head: { seq: 2, entry_hash: chain[2]!.entry_hash },
      outbox,
    });
    for (const s of after.sessions) expect(s.at_seq).toBeNull();
    for (const a of after.accounts) expect(a?.at_seq).toBeNull();
    // The migrated rows take stamps, heartbeats and new entries like any other.
    await sub.transaction(async (tx) => {
      await tx.sessions.update({ ...sessions[0]!, call_count: 1, at_seq: 3 });
      await tx.sessions.touch("s2", EPOCH_NS);
      await tx.budgets.updateAccount({ ...accounts[1]!, at_seq: 3 });
      await tx.chain.append(entry(3, chain[2]!.entry_hash));
    });
    const stamped = await sub.transaction(async (tx) => ({
      s1: await tx.sessions.get("s1"),
      s2: await tx.sessions.get("s2"),
      account: await tx.budgets.getAccount("a"),
      head: (await tx.chain.head())?.seq,
    }));
    expect(stamped).toEqual({
      s1: { ...sessions[0]!, call_count: 1, at_seq: 3 },
      s2: { ...sessions[1]!, last_heartbeat_ns: EPOCH_NS },
      account: { ...accounts[1]!, at_seq: 3 },
      head: 3,
    });
  });
});
