// Tests of SQLite schema migrations: upgrading databases written by older layouts, keeping their data.
// Migrating empty stores, idempotence and concurrent migrators are also in the contract suite.
import { SubstrateError } from "@leash/core";
import { makeChain, outboxItemFor } from "@leash/substrate-contract";
// Not in package.json: @leash/test-stores depends on this package, and turbo refuses the cycle a
// devDependency back would make; tests resolve it through the root vitest config's alias to its source.
import { storeAtVersion } from "@leash/test-stores";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { account, freshDbPath, hitlRequest, reservation, session, T0 } from "../test/support.js";
import { applyMigrations, MIGRATIONS, SCHEMA_VERSION } from "./schema.js";
import { openSqliteSubstrate, type SqliteSubstrate } from "./substrate.js";

/** Every migration, in order: what a store at the current schema has applied. */
const ALL_VERSIONS = MIGRATIONS.map((m) => m.version);

const open: SqliteSubstrate[] = [];
afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
});

async function openAt(path: string): Promise<SqliteSubstrate> {
  const sub = await openSqliteSubstrate({ path });
  open.push(sub);
  return sub;
}

function versions(path: string): number[] {
  const db = new Database(path, { readonly: true });
  const rows = db
    .prepare("SELECT version FROM leash_schema_version ORDER BY version")
    .pluck()
    .all() as number[];
  db.close();
  return rows;
}

function indexes(path: string): string[] {
  const db = new Database(path, { readonly: true });
  const rows = db
    .prepare("SELECT name FROM sqlite_schema WHERE type = 'index' AND name LIKE 'leash_%' ORDER BY name")
    .pluck()
    .all() as string[];
  db.close();
  return rows;
}

/** The layout as version 1 wrote it, typed out by hand so that later edits to MIGRATIONS cannot change it. */
const VERSION_1_LAYOUT = `
  CREATE TABLE leash_schema_version (
    version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at_ms INTEGER NOT NULL
  ) STRICT;
  INSERT INTO leash_schema_version VALUES (1, 'tables', 0);
  CREATE TABLE leash_sessions (
    session_id TEXT NOT NULL PRIMARY KEY, agent_id TEXT NOT NULL, organization_id TEXT NOT NULL,
    status TEXT NOT NULL, config TEXT NOT NULL, state TEXT NOT NULL, call_count INTEGER NOT NULL,
    created_ns INTEGER NOT NULL, updated_ns INTEGER NOT NULL, last_heartbeat_ns INTEGER
  ) STRICT;
  CREATE TABLE leash_nonces (
    session_id TEXT NOT NULL, nonce TEXT NOT NULL, recorded_ns INTEGER NOT NULL,
    PRIMARY KEY (session_id, nonce)
  ) STRICT, WITHOUT ROWID;
  CREATE TABLE leash_budget_accounts (
    account_id TEXT NOT NULL PRIMARY KEY, scope TEXT NOT NULL, parent_id TEXT, limit_usd TEXT NOT NULL,
    spent_usd TEXT NOT NULL, reserved_usd TEXT NOT NULL, created_ns INTEGER NOT NULL, updated_ns INTEGER NOT NULL
  ) STRICT;
  CREATE TABLE leash_reservations (
    reservation_id TEXT NOT NULL PRIMARY KEY, account_ids TEXT NOT NULL, session_id TEXT NOT NULL,
    call_number INTEGER NOT NULL, amount_usd TEXT NOT NULL, actual_usd TEXT, status TEXT NOT NULL,
    idempotency_key TEXT, created_ns INTEGER NOT NULL, expires_ns INTEGER NOT NULL, resolved_ns INTEGER
  ) STRICT;
  CREATE TABLE leash_hitl_requests (
    request_id TEXT NOT NULL PRIMARY KEY, session_id TEXT NOT NULL, call_number INTEGER NOT NULL,
    tool_name TEXT NOT NULL, nonce TEXT, args_digest TEXT, reason TEXT NOT NULL, status TEXT NOT NULL,
    decision TEXT, operator_id TEXT, successor_nonce TEXT, successor_args_digest TEXT,
    created_ns INTEGER NOT NULL, decided_ns INTEGER
  ) STRICT;
`;

/** What version 2 added to version 1, typed out by hand for the same reason. */
const VERSION_2_ADDITIONS = `
  INSERT INTO leash_schema_version VALUES (2, 'list indexes', 0);
  CREATE INDEX leash_sessions_by_status ON leash_sessions (status, created_ns);
  CREATE INDEX leash_reservations_pending_by_expiry ON leash_reservations (expires_ns, created_ns)
    WHERE status = 'PENDING';
  CREATE INDEX leash_reservations_by_session ON leash_reservations (session_id, created_ns);
  CREATE INDEX leash_hitl_requests_by_session ON leash_hitl_requests (session_id, created_ns);
  CREATE INDEX leash_hitl_requests_by_status ON leash_hitl_requests (status, created_ns);
`;

const VERSION_2_INDEXES = [
  "leash_hitl_requests_by_session",
  "leash_hitl_requests_by_status",
  "leash_reservations_by_session",
  "leash_reservations_pending_by_expiry",
  "leash_sessions_by_status",
];

// Version 4 dropped leash_chain_by_session and leash_outbox_by_session, which version 3 had made;
// version 7 added the unique index of spent nonces; version 8 the decided messages' prune index.
const ALL_INDEXES = [
  "leash_chain_nonces",
  ...VERSION_2_INDEXES.slice(0, 2),
  "leash_messages_by_sent",
  "leash_outbox_by_status",
  ...VERSION_2_INDEXES.slice(2),
];

describe("migrations", () => {
  it("the list is strictly increasing from 1 and SCHEMA_VERSION is its last", () => {
    // Strictly increasing, not contiguous: numbers are taken by parallel work (escrow's 12 before 10 and 11).
    const versions = MIGRATIONS.map((m) => m.version);
    expect(versions[0]).toBe(1);
    expect(versions.every((v, i) => i === 0 || v > versions[i - 1]!)).toBe(true);
    expect(SCHEMA_VERSION).toBe(versions[versions.length - 1]);
  });

  it("upgrades a version-1 database written by hand, keeping its rows, and is then idempotent", async () => {
    const path = freshDbPath();
    const old = new Database(path);
    old.exec(VERSION_1_LAYOUT);
    // Rows written before stamps existed read back with at_seq null.
    const s = session("s-old", { state: { total_calls: 3, budget_spent_usd: 0.1 }, at_seq: null });
    old
      .prepare(
        `INSERT INTO leash_sessions VALUES (?, 'agent-1', 'org-1', 'ACTIVE', ?, ?, 0, ${T0}, ${T0}, NULL)`,
      )
      .run(s.session_id, JSON.stringify(s.config), JSON.stringify(s.state));
    old.prepare(`INSERT INTO leash_nonces VALUES ('s-old', 'n:7', ${T0}), ('s-old', 's:7', ${T0})`).run();
    old
      .prepare(
        `INSERT INTO leash_reservations VALUES ('r-old', '["acct-session","acct-agent"]', 'sess-1', 1,
           '0.001', NULL, 'PENDING', NULL, ${T0}, ${T0 + 1000}, NULL)`,
      )
      .run();
    old.close();
    expect(indexes(path)).toEqual([]);

    const sub = await openAt(path);
    await expect(sub.transaction((tx) => tx.sessions.get("s-old"))).rejects.toThrow(/call migrate\(\) first/);
    await sub.migrate();
    expect(versions(path)).toEqual(ALL_VERSIONS);
    expect(indexes(path)).toEqual(ALL_INDEXES);
    const kept = await sub.transaction(async (tx) => ({
      session: await tx.sessions.get("s-old"),
      nonces: [
        await tx.nonces.has("s-old", 7),
        await tx.nonces.has("s-old", "7"),
        await tx.nonces.count("s-old"),
      ],
      expired: await tx.budgets.listExpired(T0 + 1000, 10),
    }));
    expect(kept).toEqual({ session: s, nonces: [true, true, 2], expired: [reservation("r-old")] });

    await sub.migrate();
    expect(versions(path)).toEqual(ALL_VERSIONS);
  });

  it("upgrades a version-2 database holding data to the latest version: rows kept, chain and outbox start empty", async () => {
    const path = freshDbPath();
    const old = new Database(path);
    old.exec(VERSION_1_LAYOUT);
    old.exec(VERSION_2_ADDITIONS);
    const s = session("s-v2", { call_count: 4, last_heartbeat_ns: T0 + 9, at_seq: null });
    old
      .prepare(
        `INSERT INTO leash_sessions VALUES (?, 'agent-1', 'org-1', 'ACTIVE', ?, ?, 4, ${T0}, ${T0}, ${T0 + 9})`,
      )
      .run(s.session_id, JSON.stringify(s.config), JSON.stringify(s.state));
    old.prepare(`INSERT INTO leash_nonces VALUES ('s-v2', 'n:7', ${T0})`).run();
    old
      .prepare(
        `INSERT INTO leash_hitl_requests VALUES ('h-v2', 'sess-1', 4, 'wire_transfer', 'n:7', ?, 'hitl_all_calls',
           'PENDING', NULL, NULL, NULL, NULL, ${T0}, NULL)`,
      )
      .run("ab".repeat(32));
    old.close();
    expect(versions(path)).toEqual([1, 2]);
    expect(indexes(path)).toEqual(VERSION_2_INDEXES);

    const sub = await openAt(path);
    await expect(sub.transaction((tx) => tx.chain.head())).rejects.toThrow(/call migrate\(\) first/);
    await sub.migrate();
    expect(versions(path)).toEqual(ALL_VERSIONS);
    expect(indexes(path)).toEqual(ALL_INDEXES);
    const kept = await sub.transaction(async (tx) => ({
      session: await tx.sessions.get("s-v2"),
      nonce: await tx.nonces.has("s-v2", 7),
      hitl: await tx.hitl.list({ status: "PENDING" }),
      head: await tx.chain.head(),
      entries: await tx.chain.count(),
      outbox: await tx.outbox.counts(),
    }));
    expect(kept).toEqual({
      session: s,
      nonce: true,
      hitl: [hitlRequest("h-v2")],
      head: null,
      entries: 0,
      outbox: { PENDING: 0, DELIVERED: 0, DEAD: 0 },
    });
    const entry = {
      seq: 0,
      entry_id: "e0",
      entry_hash: "cd".repeat(32),
      prev_hash: "0".repeat(64),
      body: '{"b":1,"a":"ü"}',
      signature: "sig",
      key_id: "k1",
      kind: "decision",
      session_id: "s-v2",
      created_ns: T0,
    };
    await sub.transaction(async (tx) => {
      await tx.chain.append(entry);
      await tx.outbox.enqueue({ seq: 0, entry_id: "e0", session_id: "s-v2", created_ns: T0 });
    });
    expect(await sub.transaction((tx) => tx.chain.range(0, 10))).toEqual([entry]);
    await sub.migrate();
    expect(versions(path)).toEqual(ALL_VERSIONS);
  });

  it("migrates a version-0 database (none of Leash's tables) without touching the tables already there", async () => {
    const path = freshDbPath();
    const before = new Database(path);
    before.exec(
      "CREATE TABLE app_notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO app_notes VALUES (1, 'kept');",
    );
    before.close();
    const sub = await openAt(path);
    await sub.migrate();
    await sub.transaction((tx) => tx.sessions.insert(session("s1")));
    expect(versions(path)).toEqual(ALL_VERSIONS);
    const after = new Database(path, { readonly: true });
    expect(after.prepare("SELECT body FROM app_notes").pluck().get()).toBe("kept");
    after.close();
  });

  it('refuses a database migrated by a newer build with "corrupt", and leaves it as it was', async () => {
    const path = freshDbPath();
    const sub = await openAt(path);
    await sub.migrate();
    const newer = new Database(path);
    newer
      .prepare("INSERT INTO leash_schema_version VALUES (?, 'from the future', 0)")
      .run(SCHEMA_VERSION + 1);
    newer.close();
    const second = await openAt(path);
    const error = await second.migrate().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(SubstrateError.isInstance(error) && error.code).toBe("corrupt");
    await expect(second.transaction(async () => 1)).rejects.toMatchObject({ code: "corrupt" });
    expect(versions(path)).toEqual([...ALL_VERSIONS, SCHEMA_VERSION + 1]);
  });

  it("a failing migration rolls back entirely, leaving the older version in place", async () => {
    const path = freshDbPath();
    const old = new Database(path);
    old.exec(VERSION_1_LAYOUT);
    // An index named like version 2's makes its CREATE INDEX fail half way through the migration.
    old.exec("CREATE TABLE squatter (x); CREATE INDEX leash_reservations_by_session ON squatter (x);");
    old.close();
    const sub = await openAt(path);
    await expect(sub.migrate()).rejects.toMatchObject({ code: "io" });
    expect(versions(path)).toEqual([1]);
    expect(indexes(path)).toEqual(["leash_reservations_by_session"]);
  });

  it("upgrades a version-4 store with a pending HITL request: the row is kept, with no content and no expiry", async () => {
    const path = freshDbPath();
    const old = new Database(path);
    old.exec("BEGIN IMMEDIATE");
    applyMigrations(old, MIGRATIONS.slice(0, 4));
    old.exec("COMMIT");
    old
      .prepare(
        `INSERT INTO leash_hitl_requests VALUES ('h-v4', 'sess-1', 4, 'wire_transfer', 'n:7', ?, 'hitl_all_calls',
           'PENDING', NULL, NULL, NULL, NULL, ${T0}, NULL)`,
      )
      .run("ab".repeat(32));
    old.close();
    expect(versions(path)).toEqual([1, 2, 3, 4]);

    const sub = await openAt(path);
    await sub.migrate();
    expect(versions(path)).toEqual(ALL_VERSIONS);
    const kept = await sub.transaction((tx) => tx.hitl.list({ status: "PENDING" }));
    expect(kept).toEqual([hitlRequest("h-v4")]);
    expect(kept[0]?.expires_ns).toBeNull();
    // The new columns take an answer to the old request like any other.
    const answered = hitlRequest("h-v4", {
      status: "DECIDED",
      decision: "reject",
      operator_id: "alice",
      comment: "not today",
      decided_ns: T0 + 5,
    });
    await sub.transaction((tx) => tx.hitl.update(answered));
    expect(await sub.transaction((tx) => tx.hitl.get("h-v4"))).toEqual(answered);
  });

  it("upgrades a version-6 store (the last without the nonce column) with nonce rows and entries: old nonces still count as spent and are refused again", async () => {
    const path = freshDbPath();
    const old = new Database(path);
    old.exec("BEGIN IMMEDIATE");
    applyMigrations(old, MIGRATIONS.slice(0, 6));
    old.exec("COMMIT");
    // What a version-6 engine wrote for two ALLOWs: a leash_nonces row each, and entries without a nonce column.
    old.prepare(`INSERT INTO leash_nonces VALUES ('s-v5', 'n:7', ${T0}), ('s-v5', 's:a', ${T0})`).run();
    const insert = old.prepare(
      `INSERT INTO leash_chain VALUES (?, ?, ?, ?, '{"v":5}', 'sig', 'k1', 'decision', 's-v5', ${T0})`,
    );
    insert.run(0, "e0", "aa".repeat(32), "0".repeat(64));
    insert.run(1, "e1", "bb".repeat(32), "aa".repeat(32));
    old.close();
    expect(versions(path)).toEqual([1, 2, 3, 4, 5, 6]);

    const sub = await openAt(path);
    await sub.migrate();
    expect(versions(path)).toEqual(ALL_VERSIONS);
    const seen = await sub.transaction(async (tx) => ({
      has: [
        await tx.nonces.has("s-v5", 7),
        await tx.nonces.has("s-v5", "a"),
        await tx.nonces.has("s-v5", "7"),
        await tx.nonces.has("s-other", 7),
      ],
      count: await tx.nonces.count("s-v5"),
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
    const next = (seq: number, nonce: number | string) => ({
      seq,
      entry_id: `e${seq}`,
      entry_hash: String(seq).repeat(64).slice(0, 64),
      prev_hash:
        seq === 2
          ? "bb".repeat(32)
          : String(seq - 1)
              .repeat(64)
              .slice(0, 64),
      body: `{"seq":${seq}}`,
      signature: "sig",
      key_id: "k1",
      kind: "decision",
      session_id: "s-v5",
      created_ns: T0 + seq,
      nonce,
    });
    // A nonce of the old table is spent: appending it again is refused and appends nothing.
    for (const nonce of [7, "a"]) {
      await expect(sub.transaction((tx) => tx.chain.append(next(2, nonce)))).rejects.toMatchObject({
        code: "conflict",
        message: expect.stringContaining("already spent"),
      });
    }
    expect(await sub.transaction((tx) => tx.chain.count())).toBe(2);
    // The string "7" is another nonce; spent once on an entry, it is refused there too.
    await sub.transaction((tx) => tx.chain.append(next(2, "7")));
    await expect(sub.transaction((tx) => tx.chain.append(next(3, "7")))).rejects.toMatchObject({
      code: "conflict",
    });
    const after = await sub.transaction(async (tx) => ({
      has: await tx.nonces.has("s-v5", "7"),
      count: await tx.nonces.count("s-v5"),
      entries: await tx.chain.count(),
    }));
    expect(after).toEqual({ has: true, count: 3, entries: 3 });
  });

  it("many handles migrating one fresh file at once all succeed and apply each migration once", async () => {
    const path = freshDbPath();
    const subs = await Promise.all(Array.from({ length: 4 }, () => openAt(path)));
    await Promise.all(subs.flatMap((sub) => [sub.migrate(), sub.migrate()]));
    expect(versions(path)).toEqual(ALL_VERSIONS);
  });
});

describe("migrating a store written at version 5 (before the snapshot stamps)", () => {
  it("keeps every row of every table equal, with at_seq null on sessions and accounts", async () => {
    // Rows of every kind, written through the port into a current store, then copied into the v5 layout
    // (the migrations as they stood at version 5, nothing after; the columns the two share), as the
    // build before this one would have written them.
    const sourcePath = freshDbPath("source.db");
    const source = await openAt(sourcePath);
    await source.migrate();
    const sessions = [
      session("s-1", { last_heartbeat_ns: T0 + 5, at_seq: null }),
      session("s-2", { status: "PAUSED", last_heartbeat_ns: null, call_count: 2, at_seq: null }),
    ];
    const accounts = [
      account("acct-org", { scope: "organization", limit_usd: "1000", at_seq: null }),
      account("acct-session", {
        parent_id: "acct-org",
        spent_usd: "0.25",
        reserved_usd: "0.001",
        at_seq: null,
      }),
    ];
    const reservations = [
      reservation("r-1", { account_ids: ["acct-session", "acct-org"], session_id: "s-1" }),
      reservation("r-2", { status: "SETTLED", actual_usd: "0.25", resolved_ns: T0 + 9, session_id: "s-1" }),
    ];
    const hitl = [
      hitlRequest("h-1", {
        session_id: "s-1",
        nonce: "n-7",
        params_json: '{"amount":10}',
        expires_ns: T0 + 60,
      }),
      hitlRequest("h-2", {
        session_id: "s-2",
        status: "DECIDED",
        decision: "modify",
        operator_id: "alice",
        successor_nonce: 8,
        successor_params_json: '{"amount":5}',
        decided_ns: T0 + 3,
      }),
    ];
    const chain = makeChain(3);
    await source.transaction(async (tx) => {
      for (const s of sessions) await tx.sessions.insert(s);
      for (const a of accounts) await tx.budgets.insertAccount(a);
      for (const r of reservations) await tx.budgets.insertReservation(r);
      for (const h of hitl) await tx.hitl.insert(h);
      for (const entry of chain) {
        await tx.chain.append(entry);
        await tx.outbox.enqueue(outboxItemFor(entry));
      }
    });
    await source.transaction((tx) =>
      tx.outbox.claim({ relayId: "relay-1", limit: 1, nowNs: T0, leaseNs: 1000 }),
    );
    const before = await source.transaction(async (tx) => ({
      outbox: await tx.outbox.list({}),
    }));
    const path = freshDbPath();
    await storeAtVersion({ path, schema: null }, 5, { path: sourcePath, schema: null });
    // The nonces a version-5 engine recorded: rows of leash_nonces (type-tagged), not entry columns.
    const raw = new Database(path);
    raw.prepare(`INSERT INTO leash_nonces VALUES ('s-1', 'n:7', ${T0}), ('s-1', 's:7', ${T0})`).run();
    raw.close();
    expect(versions(path)).toEqual([1, 2, 3, 4, 5]);

    const sub = await openAt(path);
    await sub.migrate();
    expect(versions(path)).toEqual(ALL_VERSIONS);
    const after = await sub.transaction(async (tx) => ({
      sessions: await tx.sessions.list(),
      accounts: await Promise.all(accounts.map((a) => tx.budgets.getAccount(a.account_id))),
      reservations: await tx.budgets.listReservations({}),
      hitl: await tx.hitl.list({}),
      nonces: [await tx.nonces.has("s-1", 7), await tx.nonces.has("s-1", "7"), await tx.nonces.count("s-1")],
      chain: await tx.chain.range(0, 10),
      head: await tx.chain.head(),
      outbox: await tx.outbox.list({}),
    }));
    expect(after).toEqual({
      sessions,
      accounts,
      reservations,
      hitl,
      nonces: [true, true, 2],
      chain,
      head: { seq: 2, entry_hash: chain[2]!.entry_hash },
      outbox: before.outbox,
    });
    for (const s of after.sessions) expect(s.at_seq).toBeNull();
    for (const a of after.accounts) expect(a?.at_seq).toBeNull();
    // The migrated rows take stamps and heartbeats like any other.
    await sub.transaction(async (tx) => {
      await tx.sessions.update({ ...sessions[0]!, call_count: 1, at_seq: 3 });
      await tx.sessions.touch("s-2", T0 + 100);
      await tx.budgets.updateAccount({ ...accounts[1]!, at_seq: 3 });
    });
    const stamped = await sub.transaction(async (tx) => ({
      s1: await tx.sessions.get("s-1"),
      s2: await tx.sessions.get("s-2"),
      account: await tx.budgets.getAccount("acct-session"),
    }));
    expect(stamped.s1).toEqual({ ...sessions[0]!, call_count: 1, at_seq: 3 });
    expect(stamped.s2).toEqual({ ...sessions[1]!, last_heartbeat_ns: T0 + 100 });
    expect(stamped.account).toEqual({ ...accounts[1]!, at_seq: 3 });
  });
});
