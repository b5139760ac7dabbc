// Tests of what is particular to the SQLite substrate: group commit, lock waits, error mapping, pragmas.
// The port's shared guarantees are the contract suite's (sqlite.contract.test.ts); processes: multiprocess.test.ts.
import { writeFileSync } from "node:fs";
import type { Substrate } from "@leash/core";
import { SubstrateError } from "@leash/core";
import { makeChainEntry, spendIn } from "@leash/substrate-contract";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { account, freshDbPath, hitlRequest, reservation, session, T0 } from "../test/support.js";
import { resolveOptions } from "./options.js";
import { openSqliteSubstrate, SqliteSubstrate } from "./substrate.js";
import { parseSqliteUrl } from "./url.js";
import { WalSyncer } from "./wal-sync.js";

const open: Substrate[] = [];
afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
});

async function openMigrated(
  path = freshDbPath(),
  extra: Partial<Parameters<typeof openSqliteSubstrate>[0]> = {},
) {
  const substrate = await openSqliteSubstrate({ path, ...extra });
  open.push(substrate);
  await substrate.migrate();
  return substrate;
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    (value) => {
      throw new Error(`expected a rejection, got ${String(value)}`);
    },
    (error: unknown) => error,
  );
}

async function substrateError(promise: Promise<unknown>, code: string): Promise<SubstrateError> {
  const error = await rejection(promise);
  expect(SubstrateError.isInstance(error), String(error)).toBe(true);
  expect((error as SubstrateError).code).toBe(code);
  return error as SubstrateError;
}

describe("opening", () => {
  it("declares kind sqlite, multi-process and durable, and puts the file in WAL mode", async () => {
    const path = freshDbPath();
    const sub = await openMigrated(path);
    expect(sub.kind).toBe("sqlite");
    expect(sub.capabilities).toEqual({ multiProcess: true, durable: true });
    const raw = new Database(path);
    expect(raw.pragma("journal_mode", { simple: true })).toBe("wal");
    raw.close();
  });

  it("works with memory-mapped reads off as well as on (the default), and refuses a negative size", async () => {
    const path = freshDbPath();
    const off = await openMigrated(path, { mmapSizeBytes: 0 });
    await off.transaction((tx) => tx.sessions.insert(session("s-mmap")));
    await off.close();
    const on = await openMigrated(path);
    expect((await on.transaction((tx) => tx.sessions.get("s-mmap")))?.session_id).toBe("s-mmap");
    await expect(openSqliteSubstrate({ path, mmapSizeBytes: -1 })).rejects.toThrow(/mmapSizeBytes/);
  });

  it("is not durable with synchronous=NORMAL (a WAL commit is then not fsynced)", async () => {
    const sub = await openMigrated(freshDbPath(), { synchronous: "NORMAL" });
    expect(sub.capabilities).toEqual({ multiProcess: true, durable: false });
  });

  it("opens what parseSqliteUrl returns", async () => {
    const path = freshDbPath();
    const sub = await openSqliteSubstrate(
      parseSqliteUrl(`sqlite://${path}?busy_timeout=100&group_commit=off`),
    );
    open.push(sub);
    await sub.migrate();
    await sub.transaction((tx) => tx.sessions.insert(session("s1")));
    expect(await sub.transaction((tx) => tx.sessions.get("s1"))).toEqual(session("s1"));
  });

  it("refuses in-memory and empty paths and bad options before touching anything", async () => {
    await expect(openSqliteSubstrate({ path: ":memory:" })).rejects.toThrow(TypeError);
    await expect(openSqliteSubstrate({ path: "" })).rejects.toThrow(TypeError);
    await expect(openSqliteSubstrate({ path: freshDbPath(), busyTimeoutMs: -1 })).rejects.toThrow(RangeError);
    await expect(openSqliteSubstrate({ path: freshDbPath(), groupCommit: { maxBatch: 0 } })).rejects.toThrow(
      RangeError,
    );
  });

  it('maps a file that is not a database to "corrupt", keeping the cause', async () => {
    const path = freshDbPath();
    writeFileSync(path, Buffer.alloc(8192, "this is not a SQLite database. "));
    const error = await substrateError(openSqliteSubstrate({ path }), "corrupt");
    expect((error.cause as { code?: string }).code).toBe("SQLITE_NOTADB");
  });

  it('maps a missing directory to "io"', async () => {
    await substrateError(openSqliteSubstrate({ path: `${freshDbPath()}/nested/leash.db` }), "io");
  });
});

describe("stores", () => {
  it("round-trips every store and keeps the number 7 and the string '7' apart", async () => {
    const sub = await openMigrated();
    const rows = {
      s: session("s1", { last_heartbeat_ns: T0 + 5, config: { budget_usd: 0.1 } }),
      a: account("a1", { limit_usd: "99999999999999999999.000000000001", parent_id: "a0" }),
      r: reservation("r1", { idempotency_key: "k1", actual_usd: "0.0010" }),
      h: hitlRequest("h1", { nonce: "7", successor_nonce: 8, decided_ns: T0 + 9 }),
    };
    await sub.transaction(async (tx) => {
      await tx.sessions.insert(rows.s);
      await tx.budgets.insertAccount(rows.a);
      await tx.budgets.insertReservation(rows.r);
      await tx.hitl.insert(rows.h);
      await spendIn(tx, "s1", 7);
      await spendIn(tx, "s1", "7");
      await spendIn(tx, "s2", 7);
    });
    await substrateError(
      sub.transaction((tx) => spendIn(tx, "s1", 7)),
      "conflict",
    );
    // Stored type-tagged, as leash_nonces held them.
    const db = new Database(sub.path, { readonly: true });
    expect(db.prepare("SELECT nonce FROM leash_chain ORDER BY seq").pluck().all()).toEqual([
      "n:7",
      "s:7",
      "n:7",
    ]);
    db.close();
    const back = await sub.transaction(async (tx) => ({
      s: await tx.sessions.get("s1"),
      a: await tx.budgets.getAccount("a1"),
      r: await tx.budgets.getReservation("r1"),
      h: await tx.hitl.get("h1"),
      count: await tx.nonces.count("s1"),
      has: [await tx.nonces.has("s1", 7), await tx.nonces.has("s1", "7"), await tx.nonces.has("s1", 8)],
    }));
    expect(back).toEqual({ ...rows, count: 2, has: [true, true, false] });
    expect(typeof back.h?.nonce).toBe("string");
    expect(typeof back.h?.successor_nonce).toBe("number");
  });

  it("stores decimals as TEXT and state as JSON TEXT, never REAL", async () => {
    const path = freshDbPath();
    const sub = await openMigrated(path);
    await sub.transaction(async (tx) => {
      await tx.sessions.insert(session("s1"));
      await tx.budgets.insertAccount(account("a1", { spent_usd: "0.10" }));
    });
    const raw = new Database(path, { readonly: true });
    expect(
      raw.prepare("SELECT typeof(spent_usd) AS t, spent_usd AS v FROM leash_budget_accounts").get(),
    ).toEqual({ t: "text", v: "0.10" });
    expect(
      raw.prepare("SELECT typeof(state) AS t, typeof(created_ns) AS n FROM leash_sessions").get(),
    ).toEqual({
      t: "text",
      n: "integer",
    });
    raw.close();
  });

  it('maps duplicate inserts to "conflict" and updates of missing rows to "not_found"', async () => {
    const sub = await openMigrated();
    await sub.transaction(async (tx) => {
      await tx.sessions.insert(session("s1"));
      await tx.budgets.insertAccount(account("a1"));
      await tx.budgets.insertReservation(reservation("r1"));
      await tx.hitl.insert(hitlRequest("h1"));
    });
    const conflict = await substrateError(
      sub.transaction((tx) => tx.sessions.insert(session("s1"))),
      "conflict",
    );
    expect((conflict.cause as { code?: string }).code).toBe("SQLITE_CONSTRAINT_PRIMARYKEY");
    await substrateError(
      sub.transaction((tx) => tx.budgets.insertAccount(account("a1"))),
      "conflict",
    );
    await substrateError(
      sub.transaction((tx) => tx.budgets.insertReservation(reservation("r1"))),
      "conflict",
    );
    await substrateError(
      sub.transaction((tx) => tx.hitl.insert(hitlRequest("h1"))),
      "conflict",
    );
    await substrateError(
      sub.transaction((tx) => tx.sessions.update(session("nope"))),
      "not_found",
    );
    await substrateError(
      sub.transaction((tx) => tx.budgets.updateAccount(account("nope"))),
      "not_found",
    );
    await substrateError(
      sub.transaction((tx) => tx.budgets.updateReservation(reservation("nope"))),
      "not_found",
    );
    await substrateError(
      sub.transaction((tx) => tx.hitl.update(hitlRequest("nope"))),
      "not_found",
    );
  });

  it("a caught conflict does not spoil the rest of the transaction", async () => {
    const sub = await openMigrated();
    await sub.transaction((tx) => tx.sessions.insert(session("s1")));
    await sub.transaction(async (tx) => {
      await expect(tx.sessions.insert(session("s1"))).rejects.toMatchObject({ code: "conflict" });
      await tx.sessions.insert(session("s2"));
    });
    expect((await sub.transaction((tx) => tx.sessions.list())).map((s) => s.session_id)).toEqual([
      "s1",
      "s2",
    ]);
  });

  it("refuses a non-integer or out-of-range nanosecond value with the caller's RangeError, writing nothing", async () => {
    const sub = await openMigrated();
    await expect(
      sub.transaction((tx) => tx.sessions.insert(session("s1", { created_ns: 1.5 }))),
    ).rejects.toThrow(RangeError);
    await expect(
      sub.transaction((tx) => tx.chain.append({ ...makeChainEntry(0, "0".repeat(64)), created_ns: 2 ** 63 })),
    ).rejects.toThrow(RangeError);
    expect(await sub.transaction((tx) => tx.sessions.list())).toEqual([]);
  });

  it("lists with filters and limits, and lists expired PENDING reservations by expiry", async () => {
    const sub = await openMigrated();
    await sub.transaction(async (tx) => {
      await tx.sessions.insert(session("s2", { created_ns: T0 + 2, status: "PAUSED" }));
      await tx.sessions.insert(session("s1", { created_ns: T0 + 1 }));
      await tx.sessions.insert(session("s3", { created_ns: T0 + 3 }));
      await tx.budgets.insertReservation(reservation("late", { expires_ns: T0 + 30 }));
      await tx.budgets.insertReservation(reservation("early", { expires_ns: T0 + 10 }));
      await tx.budgets.insertReservation(reservation("settled", { expires_ns: T0, status: "SETTLED" }));
      await tx.budgets.insertReservation(
        reservation("future", { expires_ns: T0 + 99, session_id: "sess-2" }),
      );
      await tx.hitl.insert(hitlRequest("h1"));
      await tx.hitl.insert(hitlRequest("h2", { session_id: "sess-2", status: "DECIDED" }));
    });
    const got = await sub.transaction(async (tx) => ({
      all: (await tx.sessions.list()).map((s) => s.session_id),
      active: (await tx.sessions.list({ status: "ACTIVE" })).map((s) => s.session_id),
      limited: (await tx.sessions.list({ limit: 1 })).map((s) => s.session_id),
      none: await tx.sessions.list({ limit: 0 }),
      expired: (await tx.budgets.listExpired(T0 + 30, 10)).map((r) => r.reservation_id),
      expiredOne: (await tx.budgets.listExpired(T0 + 30, 1)).map((r) => r.reservation_id),
      bySession: (await tx.budgets.listReservations({ sessionId: "sess-2" })).map((r) => r.reservation_id),
      byStatus: (await tx.budgets.listReservations({ status: "SETTLED" })).map((r) => r.reservation_id),
      both: await tx.budgets.listReservations({ sessionId: "sess-2", status: "SETTLED" }),
      hitl: (await tx.hitl.list({ status: "DECIDED" })).map((h) => h.request_id),
      hitlSession: (await tx.hitl.list({ sessionId: "sess-1" })).map((h) => h.request_id),
    }));
    expect(got).toEqual({
      all: ["s1", "s2", "s3"],
      active: ["s1", "s3"],
      limited: ["s1"],
      none: [],
      expired: ["early", "late"],
      expiredOne: ["early"],
      bySession: ["future"],
      byStatus: ["settled"],
      both: [],
      hitl: ["h2"],
      hitlSession: ["h1"],
    });
  });

  it('reports a row holding invalid JSON as "corrupt"', async () => {
    const path = freshDbPath();
    const sub = await openMigrated(path);
    await sub.transaction((tx) => tx.sessions.insert(session("s1")));
    const raw = new Database(path);
    raw.prepare("UPDATE leash_sessions SET state = '{not json' WHERE session_id = 's1'").run();
    raw.close();
    await substrateError(
      sub.transaction((tx) => tx.sessions.get("s1")),
      "corrupt",
    );
  });
});

describe("transactions", () => {
  it("rethrows fn's own error unchanged and keeps nothing of it", async () => {
    const sub = await openMigrated();
    const boom = new Error("boom");
    const error = await rejection(
      sub.transaction(async (tx) => {
        await tx.sessions.insert(session("s1"));
        await spendIn(tx, "s1", 1);
        throw boom;
      }),
    );
    expect(error).toBe(boom);
    expect(
      await sub.transaction(async (tx) => [
        await tx.sessions.get("s1"),
        await tx.nonces.count("s1"),
        await tx.chain.count(),
      ]),
    ).toEqual([null, 0, 0]);
  });

  it("fails a transaction on an unmigrated store with a message that says to migrate", async () => {
    const sub = await openSqliteSubstrate({ path: freshDbPath() });
    open.push(sub);
    const error = await rejection(sub.transaction((tx) => tx.sessions.list()));
    expect(String(error)).toMatch(/call migrate\(\) first/);
  });

  it('refuses use of a finished transaction\'s stores with "closed"', async () => {
    const sub = await openMigrated();
    const leaked = await sub.transaction(async (tx) => tx);
    await substrateError(leaked.sessions.get("s1"), "closed");
  });

  it('lets queued work finish on close, then answers "closed"', async () => {
    const sub = await openSqliteSubstrate({ path: freshDbPath() });
    await sub.migrate();
    const pending = [1, 2, 3].map((i) => sub.transaction((tx) => tx.sessions.insert(session(`s${i}`))));
    await sub.close();
    await expect(Promise.all(pending)).resolves.toHaveLength(3);
    await substrateError(
      sub.transaction(async () => 1),
      "closed",
    );
    await substrateError(sub.migrate(), "closed");
    await sub.close();
  });

  it("two handles in one process serialize read-modify-write without losing an update", async () => {
    const path = freshDbPath();
    const a = await openMigrated(path);
    const b = await openMigrated(path);
    await a.transaction((tx) => tx.budgets.insertAccount(account("a1")));
    const bump = (sub: Substrate) =>
      sub.transaction(async (tx) => {
        const row = (await tx.budgets.getAccount("a1"))!;
        // Yield to the event loop mid-transaction: the other handle's BEGIN must wait, not interleave.
        await new Promise((resolve) => setTimeout(resolve, 1));
        row.spent_usd = String(Number(row.spent_usd) + 1);
        await tx.budgets.updateAccount(row);
      });
    await Promise.all(Array.from({ length: 40 }, (_, i) => bump(i % 2 === 0 ? a : b)));
    expect((await b.transaction((tx) => tx.budgets.getAccount("a1")))?.spent_usd).toBe("40");
  });

  it('waits for another connection\'s write lock, then fails with "busy" after the timeout', async () => {
    const path = freshDbPath();
    const sub = await openMigrated(path, { busyTimeoutMs: 150 });
    const other = new Database(path);
    other.exec("BEGIN IMMEDIATE");
    const started = performance.now();
    const attempts = [1, 2, 3].map((i) => sub.transaction((tx) => tx.sessions.insert(session(`s${i}`))));
    for (const attempt of attempts) {
      const error = await substrateError(attempt, "busy");
      expect((error.cause as { code?: string }).code).toMatch(/^SQLITE_BUSY/);
    }
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
    // Released in time, the lock is taken and the transaction commits.
    const waiting = sub.transaction((tx) => tx.sessions.insert(session("s4")));
    setTimeout(() => other.exec("ROLLBACK"), 30);
    await waiting;
    other.close();
    expect((await sub.transaction((tx) => tx.sessions.list())).map((s) => s.session_id)).toEqual(["s4"]);
  });
});

describe("group commit", () => {
  it("50 concurrent transactions, every 5th throwing: the throwers leave nothing, the rest share few COMMITs", async () => {
    const sub = await openMigrated();
    const errors = new Map<number, Error>();
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, (_, i) =>
        sub.transaction(async (tx) => {
          await tx.sessions.insert(session(`s${i}`));
          await spendIn(tx, `s${i}`, i);
          if (i % 5 === 4) {
            const error = new Error(`tx ${i} fails`);
            errors.set(i, error);
            throw error;
          }
          return i;
        }),
      ),
    );
    results.forEach((result, i) => {
      if (i % 5 === 4) expect(result).toEqual({ status: "rejected", reason: errors.get(i) });
      else expect(result).toEqual({ status: "fulfilled", value: i });
    });
    const stored = await sub.transaction(async (tx) => ({
      sessions: (await tx.sessions.list()).map((s) => Number(s.session_id.slice(1))).sort((x, y) => x - y),
      nonces: await Promise.all(Array.from({ length: 50 }, (_, i) => tx.nonces.count(`s${i}`))),
    }));
    const expected = Array.from({ length: 50 }, (_, i) => i).filter((i) => i % 5 !== 4);
    expect(stored.sessions).toEqual(expected);
    expect(stored.nonces).toEqual(Array.from({ length: 50 }, (_, i) => (i % 5 === 4 ? 0 : 1)));
    const { stats } = sub as SqliteSubstrate;
    expect(stats.committed).toBe(41); // 40 + the read above
    expect(stats.rolledBack).toBe(10);
    expect(stats.commits).toBeLessThan(50);
    expect(stats.largestBatch).toBeGreaterThan(1);
  });

  /**
   * `size` transactions queued at once, so that they share a batch (largestBatch shows it).
   * `fail(i, run)` says whether run `run` (1 = first) of transaction i throws, and when: "before"
   * writing or "after" writing its session row.
   */
  async function batchOf(
    sub: SqliteSubstrate,
    size: number,
    fail: (i: number, run: number) => "before" | "after" | null,
  ) {
    const runs = Array.from({ length: size }, () => 0);
    const results = await Promise.allSettled(
      Array.from({ length: size }, (_, i) =>
        sub.transaction(async (tx) => {
          const run = ++runs[i]!;
          const failure = fail(i, run);
          if (failure === "before") throw new Error(`tx ${i} fails before writing`);
          await tx.sessions.insert(session(`s${i}`));
          if (failure === "after") throw new Error(`tx ${i} fails after writing`);
          return i;
        }),
      ),
    );
    const stored = (await sub.transaction((tx) => tx.sessions.list())).map((s) => s.session_id).sort();
    return { runs, results: results.map((r) => r.status), stored };
  }

  it("a failing transaction that wrote nothing leaves its batch alone: no one runs twice", async () => {
    const sub = (await openMigrated()) as SqliteSubstrate;
    const { runs, results, stored } = await batchOf(sub, 6, (i) => (i === 3 ? "before" : null));
    expect(results).toEqual(["fulfilled", "fulfilled", "fulfilled", "rejected", "fulfilled", "fulfilled"]);
    expect(runs).toEqual([1, 1, 1, 1, 1, 1]);
    expect(stored).toEqual(["s0", "s1", "s2", "s4", "s5"]);
    expect(sub.stats).toMatchObject({ reruns: 0, rolledBack: 1 });
    expect(sub.stats.largestBatch).toBeGreaterThan(1);
  });

  it("a transaction that fails having written undoes its batch; the others run again, once, and commit", async () => {
    const sub = (await openMigrated()) as SqliteSubstrate;
    // s3 fails having written; in the batch that runs the others again, s4 fails after writing too,
    // which its savepoint undoes alone: nobody runs a third time.
    const { runs, results, stored } = await batchOf(sub, 7, (i, run) =>
      i === 3 || (i === 4 && run === 1) ? "after" : null,
    );
    expect(results).toEqual([
      "fulfilled",
      "fulfilled",
      "fulfilled",
      "rejected",
      "rejected",
      "fulfilled",
      "fulfilled",
    ]);
    // s0 to s2 shared s3's batch and ran again; s4 onwards ran once, in the guarded batch.
    expect(runs).toEqual([2, 2, 2, 1, 1, 1, 1]);
    expect(stored).toEqual(["s0", "s1", "s2", "s5", "s6"]);
    expect(sub.stats).toMatchObject({ reruns: 3, rolledBack: 2, largestBatch: 6 });
  });

  it("a failing transaction whose only write returned rows (the outbox claim) is undone all the same", async () => {
    const sub = (await openMigrated()) as SqliteSubstrate;
    await sub.transaction((tx) =>
      tx.outbox.enqueue({ seq: 0, entry_id: "e0", session_id: null, created_ns: T0 }),
    );
    const claimed: number[] = [];
    const results = await Promise.allSettled([
      sub.transaction((tx) => tx.sessions.insert(session("s1"))),
      sub.transaction(async (tx) => {
        const items = await tx.outbox.claim({ relayId: "r1", nowNs: T0, leaseNs: 1e9, limit: 10 });
        claimed.push(...items.map((item) => item.seq));
        throw new Error("the relay fails after claiming");
      }),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected"]);
    expect(claimed).toEqual([0]);
    const [item] = await sub.transaction((tx) => tx.outbox.list({}));
    expect(item).toMatchObject({ seq: 0, status: "PENDING", claimed_by: null, attempts: 0 });
    expect(sub.stats.reruns).toBe(1);
  });

  it("a failing writer first in its batch is rolled back alone, and what queued behind it commits", async () => {
    const sub = (await openMigrated()) as SqliteSubstrate;
    const { runs, results, stored } = await batchOf(sub, 5, (i) => (i === 0 ? "after" : null));
    expect(results).toEqual(["rejected", "fulfilled", "fulfilled", "fulfilled", "fulfilled"]);
    expect(runs).toEqual([1, 1, 1, 1, 1]);
    expect(stored).toEqual(["s1", "s2", "s3", "s4"]);
    expect(sub.stats).toMatchObject({ reruns: 0, rolledBack: 1 });
  });

  it("a lone transaction commits at once, in its own COMMIT", async () => {
    const sub = (await openMigrated()) as SqliteSubstrate;
    await sub.transaction((tx) => tx.sessions.insert(session("s1")));
    expect(sub.stats).toMatchObject({ commits: 1, committed: 1, largestBatch: 1 });
  });

  it("respects maxBatch", async () => {
    const sub = (await openMigrated(freshDbPath(), {
      groupCommit: { maxBatch: 4, maxBatchMs: 1000 },
    })) as SqliteSubstrate;
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => sub.transaction((tx) => tx.sessions.insert(session(`s${i}`)))),
    );
    expect(sub.stats.largestBatch).toBe(4);
    expect(sub.stats.commits).toBeGreaterThanOrEqual(5);
  });

  it("with group commit off, every transaction has its own COMMIT", async () => {
    const sub = (await openMigrated(freshDbPath(), { groupCommit: false })) as SqliteSubstrate;
    const results = await Promise.allSettled(
      Array.from({ length: 10 }, (_, i) =>
        sub.transaction(async (tx) => {
          await tx.sessions.insert(session(`s${i}`));
          if (i === 3) throw new Error("no");
        }),
      ),
    );
    expect(results.filter((r) => r.status === "rejected")).toHaveLength(1);
    expect(sub.stats).toMatchObject({ commits: 9, committed: 9, rolledBack: 1, largestBatch: 1 });
    expect(await sub.transaction((tx) => tx.sessions.list())).toHaveLength(9);
  });

  it("when the shared COMMIT fails, every transaction of the batch rejects and none is stored", async () => {
    const path = freshDbPath();
    const setup = await openMigrated(path);
    await setup.close();
    open.splice(open.indexOf(setup), 1);
    // A deferred foreign key makes COMMIT itself fail: the only way to fail it on a healthy disk.
    const db = new Database(path, { timeout: 0 });
    db.pragma("journal_mode = WAL");
    db.pragma("foreign_keys = ON");
    db.exec(`
      CREATE TABLE poison_parent (id INTEGER PRIMARY KEY);
      CREATE TABLE poison_child (parent INTEGER REFERENCES poison_parent (id) DEFERRABLE INITIALLY DEFERRED);
      CREATE TRIGGER poison AFTER INSERT ON leash_sessions WHEN NEW.agent_id = 'poison'
      BEGIN INSERT INTO poison_child VALUES (42); END;
    `);
    const sub = new SqliteSubstrate(db, resolveOptions({ path }));
    open.push(sub);
    const batch = await Promise.allSettled([
      sub.transaction((tx) => tx.sessions.insert(session("ok-1"))),
      sub.transaction((tx) => tx.sessions.insert(session("bad", { agent_id: "poison" }))),
      sub.transaction((tx) => tx.sessions.insert(session("ok-2"))),
    ]);
    for (const result of batch) {
      expect(result.status).toBe("rejected");
      const reason = (result as PromiseRejectedResult).reason as SubstrateError;
      expect(reason.code).toBe("conflict");
      expect((reason.cause as { code?: string }).code).toBe("SQLITE_CONSTRAINT_FOREIGNKEY");
    }
    expect(sub.stats).toMatchObject({ commits: 0, committed: 0, rolledBack: 3 });
    expect(await sub.transaction((tx) => tx.sessions.list())).toEqual([]);
    // Point reads too: the rows the failed batch wrote were cached and must not be served.
    expect(await sub.transaction((tx) => tx.sessions.get("ok-1"))).toBeNull();
  });

  it("a transaction queued behind a slow one joins its batch and resolves only after the COMMIT", async () => {
    const sub = (await openMigrated(freshDbPath(), { groupCommit: { maxBatchMs: 1000 } })) as SqliteSubstrate;
    const order: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const slow = sub.transaction(async (tx) => {
      await tx.sessions.insert(session("slow"));
      await gate;
      order.push("slow fn done");
    });
    const quick = sub.transaction(async (tx) => {
      await tx.sessions.insert(session("quick"));
      order.push("quick fn done");
    });
    void slow.then(() => order.push("slow resolved"));
    void quick.then(() => order.push("quick resolved"));
    await new Promise((resolve) => setTimeout(resolve, 5));
    expect(order).toEqual([]);
    release();
    await Promise.all([slow, quick]);
    expect(order).toEqual(["slow fn done", "quick fn done", "slow resolved", "quick resolved"]);
    expect(sub.stats).toMatchObject({ commits: 1, committed: 2, largestBatch: 2 });
  });
});

describe("durability off the event loop (synchronous FULL)", () => {
  it("fsyncs the WAL in the thread pool, several commits per fsync, before any caller hears back", async () => {
    const path = freshDbPath();
    const sub = (await openMigrated(path)) as SqliteSubstrate;
    const before = sub.stats.walSyncs;
    expect(before).toBeGreaterThanOrEqual(1); // the migration was made durable the same way
    // Resolved callers must find their rows committed, as another connection sees them.
    const resolved = await Promise.all(
      Array.from({ length: 60 }, (_, i) =>
        sub.transaction(async (tx) => {
          await tx.sessions.insert(session(`d${i}`));
          return i;
        }),
      ),
    );
    expect(resolved).toEqual(Array.from({ length: 60 }, (_, i) => i));
    const other = new Database(path, { readonly: true });
    expect((other.prepare("SELECT COUNT(*) AS n FROM leash_sessions").get() as { n: number }).n).toBe(60);
    other.close();
    const { walSyncs, commits } = sub.stats;
    expect(walSyncs - before).toBeGreaterThanOrEqual(1);
    expect(walSyncs - before).toBeLessThanOrEqual(commits);
  });

  it("leaves fsyncing to nobody with synchronous=NORMAL, and to COMMIT itself with group commit off", async () => {
    const normal = (await openMigrated(freshDbPath(), { synchronous: "NORMAL" })) as SqliteSubstrate;
    await normal.transaction((tx) => tx.sessions.insert(session("n1")));
    expect(normal.stats.walSyncs).toBe(0);
    const off = (await openMigrated(freshDbPath(), { groupCommit: false })) as SqliteSubstrate;
    await off.transaction((tx) => tx.sessions.insert(session("o1")));
    // Group commit off still promises FULL durability; the off-thread fsync serves it too.
    expect(off.stats.walSyncs).toBeGreaterThanOrEqual(1);
  });
});

describe("WalSyncer", () => {
  it("covers many waiters with one fsync and fails every later call once an fsync is impossible", async () => {
    const path = freshDbPath();
    const sub = await openMigrated(path);
    await sub.transaction((tx) => tx.sessions.insert(session("w1")));
    const syncer = new WalSyncer(path);
    await Promise.all(Array.from({ length: 40 }, () => syncer.durable()));
    expect(syncer.syncs).toBeGreaterThanOrEqual(1);
    expect(syncer.syncs).toBeLessThan(40);
    await syncer.close();

    const missing = new WalSyncer(`${path}.absent`);
    const first = await substrateError(missing.durable(), "io");
    expect(first.message).toMatch(/could not make .*absent-wal durable/);
    const second = await substrateError(missing.durable(), "io");
    expect(second).toBe(first);
    await missing.close();
  });
});
