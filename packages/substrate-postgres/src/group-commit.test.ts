// Group commit on a real server: batches sharing one COMMIT, savepoint isolation, batch retries and
// losses, the batch lock between handles, and the stores' saved round trips. Nothing here is mocked.
import type { ChainEntryRecord, Substrate, SubstrateTx } from "@leash/core";
import { SubstrateError } from "@leash/core";
import { spendIn } from "@leash/substrate-contract";
import { Pool } from "pg";
import { describe, expect, it } from "vitest";
import { account, DB_URL, pgHarness, reservation, session, T0 } from "../test/support.js";
import {
  openPostgresSubstrate,
  type PostgresSubstrate,
  type PostgresSubstrateOptions,
  type PostgresSubstrateStats,
} from "./index.js";
import { DURABILITY_BARRIER } from "./substrate.js";

const { admin, freshSchema, track } = pgHarness("leash_pggroup");

async function openMigrated(
  schema: string,
  extra: Omit<PostgresSubstrateOptions, "url" | "schema"> = {},
): Promise<PostgresSubstrate> {
  const substrate = track(await openPostgresSubstrate({ url: DB_URL, schema, ...extra }));
  await substrate.migrate();
  return substrate;
}

type Fn<T = unknown> = (tx: SubstrateTx) => Promise<T>;

/** A chain row the store accepts (it never hashes or verifies): entry `seq`, hash `h<seq>`. */
const chainEntry = (seq: number, over: Partial<ChainEntryRecord> = {}): ChainEntryRecord => ({
  seq,
  entry_id: `e${seq}`,
  entry_hash: `h${seq}`,
  prev_hash: "0".repeat(64),
  body: "{}",
  signature: "s",
  key_id: "k",
  kind: "decision",
  session_id: null,
  created_ns: T0,
  ...over,
});

/** Appends the next entry, spending `nonce` for `sessionId` (the port's only way to spend one). */
async function spend(tx: SubstrateTx, sessionId: string, nonce: string | number): Promise<true> {
  await spendIn(tx, sessionId, nonce);
  return true;
}

/** What the counters moved by while `work` ran. */
async function counted<T>(
  sub: PostgresSubstrate,
  work: () => Promise<T>,
): Promise<{ result: T; delta: PostgresSubstrateStats }> {
  const before = sub.stats;
  const result = await work();
  const after = sub.stats;
  return {
    result,
    delta: {
      committed: after.committed - before.committed,
      rolledBack: after.rolledBack - before.rolledBack,
      commits: after.commits - before.commits,
      largestBatch: after.largestBatch,
    },
  };
}

/**
 * Runs `fns` as one batch, in order: two empty transactions first take the handle's two solo
 * places, so every fn queues, and all of them are queued before the batch that takes them begins.
 */
async function inOneBatch(
  sub: PostgresSubstrate,
  fns: readonly Fn[],
): Promise<PromiseSettledResult<unknown>[]> {
  const fillers = [sub.transaction(async () => "filler"), sub.transaction(async () => "filler")];
  const results = Promise.allSettled(fns.map((fn) => sub.transaction(fn)));
  await Promise.all(fillers);
  return results;
}

/**
 * Runs `work` with every pg client's query() going through `intercept`, which gets the query's
 * config and a function that sends it as usual.
 */
async function interceptingQueries<T>(
  intercept: (config: unknown, send: () => unknown) => unknown,
  work: () => Promise<T>,
): Promise<T> {
  const Client = (await import("pg")).Client;
  const original = Client.prototype.query;
  Client.prototype.query = function (this: unknown, config: unknown, ...rest: unknown[]) {
    return intercept(config, () => (original as (...args: unknown[]) => unknown).call(this, config, ...rest));
  } as typeof original;
  try {
    return await work();
  } finally {
    Client.prototype.query = original;
  }
}

/** Runs `work` while recording the prepared-statement names every pg client sends. */
async function statementNames<T>(work: () => Promise<T>): Promise<{ result: T; names: string[] }> {
  const names: string[] = [];
  const result = await interceptingQueries((config, send) => {
    const name = (config as { name?: string } | null)?.name;
    if (typeof name === "string") names.push(name);
    return send();
  }, work);
  return { result, names };
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

const spentOf = async (sub: Substrate, id: string) =>
  (await sub.transaction((tx) => tx.budgets.getAccount(id)))?.spent_usd;

describe("group commit", () => {
  it("concurrent transactions share COMMITs, and each sees the writes of those before it", {
    timeout: 30_000,
  }, async () => {
    const sub = await openMigrated(freshSchema());
    await sub.transaction((tx) => tx.budgets.insertAccount(account("hot")));
    const { result: seen, delta } = await counted(sub, () =>
      Promise.all(Array.from({ length: 60 }, () => increment(sub, "hot"))),
    );
    expect(seen.sort((x, y) => x - y)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
    expect(delta.committed).toBe(60);
    expect(delta.rolledBack).toBe(0);
    expect(delta.commits).toBeLessThan(delta.committed);
    expect(delta.largestBatch).toBeGreaterThan(1);
    expect(await spentOf(sub, "hot")).toBe("60");
  });

  it("a fn that throws is rolled back to its savepoint alone: the others commit, the next does not see its writes", async () => {
    const sub = await openMigrated(freshSchema());
    const boom = new Error("boom");
    const { result, delta } = await counted(sub, () =>
      inOneBatch(sub, [
        (tx) => tx.sessions.insert(session("s1")),
        async (tx) => {
          await tx.sessions.insert(session("s2"));
          await spend(tx, "s2", "n");
          throw boom;
        },
        async (tx) => {
          await tx.sessions.insert(session("s3"));
          return [await tx.sessions.get("s1"), await tx.sessions.get("s2"), await tx.nonces.has("s2", "n")];
        },
      ]),
    );
    expect(result[0]).toEqual({ status: "fulfilled", value: undefined });
    expect(result[1]).toEqual({ status: "rejected", reason: boom });
    expect(result[2]).toEqual({ status: "fulfilled", value: [session("s1"), null, false] });
    // Two fillers on their own, then the three in one batch.
    expect(delta).toEqual({ committed: 4, rolledBack: 1, commits: 3, largestBatch: 3 });
    const after = await sub.transaction(async (tx) => ({
      sessions: (await tx.sessions.list()).map((s) => s.session_id).sort(),
      nonce: await tx.nonces.has("s2", "n"),
    }));
    expect(after).toEqual({ sessions: ["s1", "s3"], nonce: false });
  });

  it("a statement error (PostgreSQL aborts the transaction) fails only its fn, thrown or swallowed", async () => {
    const sub = await openMigrated(freshSchema());
    // U+0000 cannot be stored in JSONB: the server rejects the statement.
    const bad = session("bad", { state: { last_tool_name: "a\u0000b" } });
    const result = await inOneBatch(sub, [
      (tx) => tx.sessions.insert(session("s1")),
      (tx) => tx.sessions.insert(bad),
      async (tx) => {
        await tx.sessions.insert(session("s2"));
        await tx.sessions.insert(bad).catch(() => undefined);
        return "pretend all is well";
      },
      async (tx) => {
        // A conflict is not a statement error: the transaction goes on.
        const code = await tx.sessions.insert(session("s1")).catch((e: SubstrateError) => e.code);
        await tx.sessions.insert(session("s3"));
        return code;
      },
    ]);
    expect(result.map((r) => r.status)).toEqual(["fulfilled", "rejected", "rejected", "fulfilled"]);
    for (const failed of [result[1], result[2]] as PromiseRejectedResult[]) {
      expect(SubstrateError.isInstance(failed.reason)).toBe(true);
      expect((failed.reason as SubstrateError).code).toBe("corrupt");
    }
    expect((result[3] as PromiseFulfilledResult<unknown>).value).toBe("conflict");
    const ids = await sub.transaction(async (tx) =>
      (await tx.sessions.list()).map((s) => s.session_id).sort(),
    );
    expect(ids).toEqual(["s1", "s3"]);
  });

  it("a serialization failure in one fn re-runs the batch from its start; each commits once", async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    await sub.transaction((tx) => tx.budgets.insertAccount(account("a")));
    await failTimes(schema, 1);
    const calls = [0, 0, 0];
    const { result, delta } = await counted(sub, () =>
      inOneBatch(sub, [
        async (tx) => {
          calls[0]!++;
          return spend(tx, "s1", "n1");
        },
        async (tx) => {
          calls[1]!++;
          const row = (await tx.budgets.getAccount("a"))!;
          // Caught and swallowed: the batch is retried all the same.
          await tx.budgets.updateAccount({ ...row, spent_usd: "1" }).catch(() => undefined);
          return spend(tx, "s1", "n2");
        },
        async (tx) => {
          calls[2]!++;
          return spend(tx, "s1", "n3");
        },
      ]),
    );
    expect(result).toEqual([
      { status: "fulfilled", value: true },
      { status: "fulfilled", value: true },
      { status: "fulfilled", value: true },
    ]);
    // The first ran again (it shared the rolled-back transaction); the third had not started.
    expect(calls).toEqual([2, 2, 1]);
    expect(delta.committed).toBe(5);
    expect(await sub.transaction((tx) => tx.nonces.count("s1"))).toBe(3);
    expect(await spentOf(sub, "a")).toBe("1");
  });

  it("a fn that keeps failing on serialization gives up alone; those sharing its batches commit", async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema, { maxRetries: 2 });
    await sub.transaction((tx) => tx.budgets.insertAccount(account("a")));
    await failTimes(schema, 1_000);
    const calls = [0, 0];
    const result = await inOneBatch(sub, [
      async (tx) => {
        calls[0]!++;
        return spend(tx, "s1", "n1");
      },
      async (tx) => {
        calls[1]!++;
        const row = (await tx.budgets.getAccount("a"))!;
        await tx.budgets.updateAccount({ ...row, spent_usd: "1" });
      },
    ]);
    expect(result[0]).toEqual({ status: "fulfilled", value: true });
    const error = (result[1] as PromiseRejectedResult).reason as SubstrateError;
    expect(error.code).toBe("serialization");
    expect(error.message).toMatch(/after 3 attempts/);
    // Three failed batches, then the first once more without the one that gave up.
    expect(calls).toEqual([4, 3]);
    expect(await spentOf(sub, "a")).toBe("0");
    expect(await sub.transaction((tx) => tx.nonces.count("s1"))).toBe(1);
  });

  it("a serialization failure at the shared COMMIT (deferred trigger) re-runs every fn of the batch", async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    await failTimes(schema, 1, true);
    const calls = [0, 0];
    const result = await inOneBatch(sub, [
      async (tx) => {
        calls[0]!++;
        return spend(tx, "s1", "n1");
      },
      async (tx) => {
        calls[1]!++;
        return spend(tx, "s1", "n2");
      },
    ]);
    expect(result.map((r) => r.status)).toEqual(["fulfilled", "fulfilled"]);
    expect(calls).toEqual([2, 2]);
    expect(await sub.transaction((tx) => tx.nonces.count("s1"))).toBe(2);
  });

  it('a connection lost mid-batch fails what ran in it with "io" and commits none of it; the rest run in the next batch', async () => {
    const schema = freshSchema();
    const app = `leash_group_io_${process.pid}_${Date.now().toString(36)}`;
    const pool = new Pool({ connectionString: DB_URL, max: 4, application_name: app, pipeline: true });
    // The killed connection's socket error reaches the pool once it is discarded; unhandled, it would throw.
    pool.on("error", () => undefined);
    try {
      const sub = await openPostgresSubstrate({ pool, schema });
      await sub.migrate();
      const result = await inOneBatch(sub, [
        (tx) => tx.sessions.insert(session("s1")),
        async (tx) => {
          await tx.sessions.insert(session("s2"));
          // The batch's connection is the one holding the batch lock exclusively.
          await admin.query(
            `SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'advisory' AND l.mode = 'ExclusiveLock' AND a.application_name = $1`,
            [app],
          );
          // A statement after the kill (s1 itself would be answered from the batch's memory).
          await tx.sessions.list();
        },
        (tx) => tx.sessions.insert(session("s3")),
      ]);
      expect(result.map((r) => r.status)).toEqual(["rejected", "rejected", "fulfilled"]);
      for (const failed of result.slice(0, 2) as PromiseRejectedResult[]) {
        expect((failed.reason as SubstrateError).code).toBe("io");
      }
      const ids = await sub.transaction(async (tx) => (await tx.sessions.list()).map((s) => s.session_id));
      expect(ids).toEqual(["s3"]);
      await sub.close();
    } finally {
      await pool.end();
    }
  });

  it("batches of two handles never deadlock: crossing session and account locks, every fn runs once", {
    timeout: 60_000,
  }, async () => {
    const schema = freshSchema();
    const [a, b] = [await openMigrated(schema), await openMigrated(schema)];
    await a.transaction(async (tx) => {
      await tx.budgets.insertAccount(account("x"));
      for (let i = 0; i < 3; i++) await tx.sessions.insert(session(`s${i}`));
    });
    // Each fn locks a session, then the account. Within a batch the account stays locked while the
    // next fn asks for its session, which the other handle's batch may hold while it waits for the
    // account: without the batch lock, a deadlock PostgreSQL breaks after a second, and a retry.
    let calls = 0;
    const work = (sub: Substrate, i: number) =>
      sub.transaction(async (tx) => {
        calls++;
        const s = (await tx.sessions.get(`s${i % 3}`))!;
        await new Promise((resolve) => setTimeout(resolve, 1));
        const x = (await tx.budgets.getAccount("x"))!;
        await tx.budgets.updateAccount({ ...x, spent_usd: String(Number(x.spent_usd) + 1) });
        await tx.sessions.update({ ...s, call_count: s.call_count + 1 });
      });
    const statsBefore = [a.stats, b.stats];
    await Promise.all(Array.from({ length: 40 }, (_, i) => [work(a, i), work(b, i + 1)]).flat());
    expect(calls).toBe(80);
    expect(await spentOf(a, "x")).toBe("80");
    const counts = await a.transaction(async (tx) => (await tx.sessions.list()).map((s) => s.call_count));
    expect(counts.reduce((sum, n) => sum + n, 0)).toBe(80);
    // Both handles really batched.
    for (const [i, sub] of [a, b].entries()) {
      expect(sub.stats.commits - statsBefore[i]!.commits).toBeLessThan(40);
    }
  });

  it("two handles racing for one budget in batches never overspend it", { timeout: 60_000 }, async () => {
    const schema = freshSchema();
    const [a, b] = [await openMigrated(schema), await openMigrated(schema)];
    // Cents as integers: 10.00 of limit, holds of 0.25.
    await a.transaction((tx) => tx.budgets.insertAccount(account("budget", { limit_usd: "1000" })));
    const hold = (sub: Substrate) =>
      sub.transaction(async (tx) => {
        const row = (await tx.budgets.getAccount("budget"))!;
        const reserved = Number(row.reserved_usd) + 25;
        if (reserved > Number(row.limit_usd)) return false;
        await tx.budgets.updateAccount({ ...row, reserved_usd: String(reserved) });
        return true;
      });
    const granted = await Promise.all(Array.from({ length: 50 }, (_, i) => hold(i % 2 ? a : b)));
    expect(granted.filter(Boolean)).toHaveLength(40);
    expect((await a.transaction((tx) => tx.budgets.getAccount("budget")))?.reserved_usd).toBe("1000");
    expect(a.stats.largestBatch + b.stats.largestBatch).toBeGreaterThan(2);
  });

  it("maxBatch caps a batch", async () => {
    const sub = await openMigrated(freshSchema(), { groupCommit: { maxBatch: 3 } });
    await sub.transaction((tx) => tx.budgets.insertAccount(account("hot")));
    const { delta } = await counted(sub, () =>
      Promise.all(Array.from({ length: 20 }, () => increment(sub, "hot"))),
    );
    expect(delta.largestBatch).toBe(3);
    expect(delta.commits).toBeGreaterThanOrEqual(Math.ceil((20 - 2) / 3));
    expect(await spentOf(sub, "hot")).toBe("20");
  });

  it("groupCommit: false gives every transaction its own COMMIT, and they still serialize", {
    timeout: 30_000,
  }, async () => {
    const sub = await openMigrated(freshSchema(), { groupCommit: false });
    await sub.transaction((tx) => tx.budgets.insertAccount(account("hot")));
    const { result: seen, delta } = await counted(sub, () =>
      Promise.all(Array.from({ length: 30 }, () => increment(sub, "hot"))),
    );
    expect(seen.sort((x, y) => x - y)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    expect(delta).toEqual({ committed: 30, rolledBack: 0, commits: 30, largestBatch: 1 });
  });

  it("batches work on a caller's pool without pipeline mode, with no pg queueing warning", async () => {
    const pool = new Pool({ connectionString: DB_URL, max: 4, pipeline: false });
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.message);
    process.on("warning", onWarning);
    try {
      const sub = await openPostgresSubstrate({ pool, schema: freshSchema() });
      await sub.migrate();
      const boom = new Error("boom");
      const result = await inOneBatch(sub, [
        async (tx) => {
          expect(await tx.sessions.get("s1")).toBeNull();
          await tx.sessions.insert(session("s1"));
        },
        async (tx) => {
          await tx.sessions.insert(session("s2"));
          throw boom;
        },
        (tx) => tx.sessions.insert(session("bad", { state: { x: "\u0000" } })),
        async (tx) => {
          const s1 = (await tx.sessions.get("s1"))!;
          await tx.sessions.update({ ...s1, call_count: 7 });
          return (await tx.sessions.get("s1"))?.call_count;
        },
      ]);
      expect(result.map((r) => r.status)).toEqual(["fulfilled", "rejected", "rejected", "fulfilled"]);
      expect((result[3] as PromiseFulfilledResult<unknown>).value).toBe(7);
      expect(sub.stats.largestBatch).toBe(4);
      const ids = await sub.transaction(async (tx) => (await tx.sessions.list()).map((s) => s.session_id));
      expect(ids).toEqual(["s1"]);
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.filter((m) => /client\.query/.test(m))).toEqual([]);
      await sub.close();
    } finally {
      process.off("warning", onWarning);
      await pool.end();
    }
  });

  it("rejects a bad maxBatch or maxBatchMs", async () => {
    await expect(openPostgresSubstrate({ url: DB_URL, groupCommit: { maxBatch: 0 } })).rejects.toThrow(
      RangeError,
    );
    await expect(openPostgresSubstrate({ url: DB_URL, groupCommit: { maxBatchMs: -1 } })).rejects.toThrow(
      RangeError,
    );
  });
});

describe("round trips the stores save", () => {
  it("a write to a row this transaction locked returns before its answer; a failure still fails the transaction", async () => {
    const sub = await openMigrated(freshSchema());
    await sub.transaction((tx) => tx.sessions.insert(session("s1")));
    let afterUpdate = "";
    const error = await sub
      .transaction(async (tx) => {
        const s1 = (await tx.sessions.get("s1"))!;
        // The server refuses this JSONB, but the update was already vouched for by the row lock.
        await tx.sessions.update({ ...s1, state: { x: "\u0000" } });
        afterUpdate = "went on";
        await tx.nonces.has("s1", "n");
      })
      .then(
        () => expect.fail("expected a rejection"),
        (e: unknown) => e as SubstrateError,
      );
    expect(afterUpdate).toBe("went on");
    // The failure reported is the update's own, not the aborted-transaction error of the read after it.
    expect(error.code).toBe("corrupt");
    expect(error.message).toMatch(/^sessions\.update/);
    expect(await sub.transaction((tx) => tx.nonces.count("s1"))).toBe(0);
  });

  it("account rows and the chain head read twice come back equal, as copies, and follow this transaction's writes", async () => {
    const sub = await openMigrated(freshSchema());
    await sub.transaction((tx) => tx.budgets.insertAccount(account("a")));
    const seen = await sub.transaction(async (tx) => {
      const first = (await tx.budgets.getAccount("a"))!;
      first.spent_usd = "999"; // a copy: changes nothing
      const second = (await tx.budgets.getAccount("a"))!;
      await tx.budgets.updateAccount({ ...second, spent_usd: "5" });
      const third = (await tx.budgets.getAccount("a"))!;
      const emptyHead = await tx.chain.head();
      await tx.chain.append(chainEntry(0));
      const head = await tx.chain.head();
      head!.seq = 42; // a copy: changes nothing
      return { second: second.spent_usd, third: third.spent_usd, emptyHead, head: await tx.chain.head() };
    });
    expect(seen).toEqual({ second: "0", third: "5", emptyHead: null, head: { seq: 0, entry_hash: "h0" } });
  });

  it("an append right after this transaction's head() is sent without waiting; a clashing entry id still fails it", async () => {
    const sub = await openMigrated(freshSchema());
    await sub.transaction(async (tx) => {
      await tx.chain.head();
      await tx.chain.append(chainEntry(0));
    });
    let afterAppend = "";
    const error = await sub
      .transaction(async (tx) => {
        await tx.chain.head();
        await tx.chain.append(chainEntry(1, { entry_id: "e0" })); // the id of entry 0: nothing goes in
        afterAppend = "went on";
      })
      .then(
        () => expect.fail("expected a rejection"),
        (e: unknown) => e as SubstrateError,
      );
    expect(afterAppend).toBe("went on");
    expect(error.code).toBe("conflict");
    expect(error.message).toMatch(/chain entry "e0" already exists/);
    expect(await sub.transaction((tx) => tx.chain.head())).toEqual({ seq: 0, entry_hash: "h0" });
    expect(await sub.transaction((tx) => tx.chain.count())).toBe(1);
  });

  it("later transactions of a batch take the account and chain head the earlier ones left without asking again; a failed one's writes are forgotten", async () => {
    const sub = await openMigrated(freshSchema());
    await sub.transaction((tx) => tx.budgets.insertAccount(account("a", { spent_usd: "0" })));
    // Each fn: read the account and the head, add to spent, append after the head it read.
    const step =
      (add: bigint, fail = false): Fn =>
      async (tx) => {
        const [row, head] = await Promise.all([tx.budgets.getAccount("a"), tx.chain.head()]);
        const seen = { spent: row!.spent_usd, head: head?.seq ?? null };
        await tx.budgets.updateAccount({ ...row!, spent_usd: String(BigInt(row!.spent_usd) + add) });
        const seq = (head?.seq ?? -1) + 1;
        await tx.chain.append(chainEntry(seq, { prev_hash: head?.entry_hash ?? "0".repeat(64) }));
        if (fail) throw new Error("changed its mind");
        return seen;
      };
    const { result: results, names } = await statementNames(() =>
      inOneBatch(sub, [step(1n), step(100n, true), step(10n), step(1000n)]),
    );
    expect(results.map((r) => (r.status === "fulfilled" ? r.value : "failed"))).toEqual([
      { spent: "0", head: null },
      "failed",
      // The failed one's +100 and its entry were rolled back to its savepoint, and forgotten too.
      { spent: "1", head: 0 },
      { spent: "11", head: 1 },
    ]);
    expect(await spentOf(sub, "a")).toBe("1011");
    expect(await sub.transaction((tx) => tx.chain.head())).toEqual({ seq: 2, entry_hash: "h2" });
    // Only the first fn read them from the server: the rest, the one after the failure included,
    // took what the last released transaction left.
    expect(names.filter((n) => n.includes("accounts_get"))).toHaveLength(1);
    expect(names.filter((n) => n.includes("chain_head"))).toHaveLength(1);
  });

  it("a locked get that finds nothing (key lock and look written together) keeps the id absent until it ends", async () => {
    const schema = freshSchema();
    const [a, b] = [await openMigrated(schema), await openMigrated(schema)];
    const events: string[] = [];
    let seenAbsent!: () => void;
    const absent = new Promise<void>((resolve) => {
      seenAbsent = resolve;
    });
    const reader = a.transaction(async (tx) => {
      const found = await tx.budgets.getReservation("r-new");
      seenAbsent();
      await new Promise((resolve) => setTimeout(resolve, 200));
      events.push("reader commits");
      return found;
    });
    await absent;
    const writer = b.transaction(async (tx) => {
      await tx.budgets.insertReservation(reservation("r-new"));
      events.push("writer inserted");
    });
    expect(await reader).toBeNull();
    await writer;
    expect(events).toEqual(["reader commits", "writer inserted"]);
  });
});

/** Makes account updates (or, deferred, chain inserts at COMMIT) raise SQLSTATE 40001 the first `times` times. */
async function failTimes(schema: string, times: number, deferred = false): Promise<void> {
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
      ? `CREATE CONSTRAINT TRIGGER fail_first AFTER INSERT ON "${schema}".leash_chain
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "${schema}".fail_first()`
      : `CREATE TRIGGER fail_first BEFORE UPDATE ON "${schema}".leash_budget_accounts
FOR EACH ROW EXECUTE FUNCTION "${schema}".fail_first()`,
  );
}

describe("insertReservation of an id this transaction found absent", () => {
  it("is sent without waiting; the transaction's later update of it is a write to a row it holds", async () => {
    const sub = await openMigrated(freshSchema());
    const settled = reservation("r1", { status: "SETTLED", actual_usd: "0.5", resolved_ns: T0 + 2 });
    await sub.transaction(async (tx) => {
      expect(await tx.budgets.getReservation("r1")).toBeNull();
      await tx.budgets.insertReservation(reservation("r1"));
      await tx.budgets.updateReservation(settled);
    });
    expect(await sub.transaction((tx) => tx.budgets.getReservation("r1"))).toEqual(settled);
  });

  it('an id not looked up waits for its answer: "conflict" at the call, which the transaction may catch', async () => {
    const sub = await openMigrated(freshSchema());
    await sub.transaction((tx) => tx.budgets.insertReservation(reservation("r1")));
    const outcome = await sub.transaction(async (tx) => {
      const error = await tx.budgets.insertReservation(reservation("r1", { amount_usd: "9" })).then(
        () => null,
        (e: unknown) => (e as SubstrateError).code,
      );
      await tx.budgets.insertReservation(reservation("r2"));
      return error;
    });
    expect(outcome).toBe("conflict");
    const ids = await sub.transaction(async (tx) =>
      (await tx.budgets.listReservations({})).map((r) => [r.reservation_id, r.amount_usd]),
    );
    expect(ids).toEqual([
      ["r1", reservation("r1").amount_usd],
      ["r2", reservation("r2").amount_usd],
    ]);
  });
});

describe("outbox.enqueue of an entry this transaction appended after the head it holds", () => {
  for (const groupCommit of [undefined, false] as const) {
    const mode = groupCommit === false ? "group commit off" : "group commit on";
    it(`is sent without waiting; an item queued without its entry still fails the transaction with "conflict" and stores none of it (${mode})`, async () => {
      const sub = await openMigrated(freshSchema(), groupCommit === false ? { groupCommit } : {});
      // An item whose entry was never appended: the one case where the append does not vouch for the seq.
      const item = { seq: 0, entry_id: "e0", session_id: "s0", created_ns: T0 };
      await sub.transaction((tx) => tx.outbox.enqueue(item));
      let after = "";
      const error = await sub
        .transaction(async (tx) => {
          await tx.sessions.insert(session("s1"));
          await tx.chain.head();
          await tx.chain.append(chainEntry(0));
          after = String(await tx.outbox.enqueue({ ...item, session_id: "s1" }));
        })
        .then(
          () => expect.fail("expected a rejection"),
          (e: unknown) => e as SubstrateError,
        );
      expect(after).toBe("undefined");
      expect(error.code).toBe("conflict");
      expect(error.message).toMatch(/outbox item 0 is already queued/);
      expect(
        await sub.transaction(async (tx) => ({
          chain: await tx.chain.count(),
          sessions: await tx.sessions.list(),
          outbox: (await tx.outbox.list({})).map((i) => [i.seq, i.entry_id, i.session_id]),
        })),
      ).toEqual({ chain: 0, sessions: [], outbox: [[0, "e0", "s0"]] });
    });
  }

  it("an enqueue of any other seq waits for its answer: a clash fails the call, which the transaction may catch", async () => {
    const sub = await openMigrated(freshSchema());
    await sub.transaction((tx) =>
      tx.outbox.enqueue({ seq: 1, entry_id: "e1", session_id: null, created_ns: T0 }),
    );
    const outcome = await sub.transaction(async (tx) => {
      await tx.chain.head();
      await tx.chain.append(chainEntry(0));
      const error = await tx.outbox
        .enqueue({ seq: 1, entry_id: "e-other", session_id: null, created_ns: T0 })
        .then(
          () => null,
          (e: unknown) => (e as SubstrateError).code,
        );
      await tx.outbox.enqueue({ seq: 0, entry_id: "e0", session_id: null, created_ns: T0 });
      return error;
    });
    expect(outcome).toBe("conflict");
    expect(await sub.transaction(async (tx) => (await tx.outbox.list({})).map((i) => i.entry_id))).toEqual([
      "e0",
      "e1",
    ]);
  });
});

/** Spends `nonce` for `sessionId` on an entry written by hand, past the head lock: a writer the batch cannot see. */
async function spentBehindTheLock(
  schema: string,
  seq: number,
  sessionId: string,
  nonce: string,
): Promise<void> {
  await admin.query(
    `INSERT INTO "${schema}".leash_chain VALUES ($1, $2, 'h', 'p', '{}', 's', 'k', 'decision', $3, ${T0}, $4)
ON CONFLICT DO NOTHING`,
    [seq, `e-hand-${seq}`, sessionId, JSON.stringify(nonce)],
  );
}

describe("chain.append of a nonce has() found unspent", () => {
  for (const groupCommit of [undefined, false] as const) {
    const mode = groupCommit === false ? "group commit off" : "group commit on";
    it(`is sent without waiting; a nonce spent meanwhile still fails the transaction with "conflict" and stores none of it (${mode})`, async () => {
      const schema = freshSchema();
      const sub = await openMigrated(schema, groupCommit === false ? { groupCommit } : {});
      await sub.transaction((tx) => spend(tx, "s1", "n1"));
      let after = "";
      const error = await sub
        .transaction(async (tx) => {
          await tx.sessions.insert(session("s1"));
          expect(await tx.nonces.has("s1", "n2")).toBe(false);
          const head = (await tx.chain.head())!;
          // Spent by another writer after has() answered: the append inserts nothing, which only its answer tells.
          await spentBehindTheLock(schema, 100, "s1", "n2");
          await tx.chain.append(
            chainEntry(head.seq + 1, { prev_hash: head.entry_hash, session_id: "s1", nonce: "n2" }),
          );
          after = "appended";
        })
        .then(
          () => expect.fail("expected a rejection"),
          (e: unknown) => e as SubstrateError,
        );
      expect(after).toBe("appended");
      expect(error.code).toBe("conflict");
      expect(error.message).toMatch(/already spent/);
      expect(
        await sub.transaction(async (tx) => ({
          nonces: await tx.nonces.count("s1"),
          chain: (await tx.chain.range(0, 200)).map((e) => [e.seq, e.nonce]),
          head: (await tx.chain.head())?.seq,
          sessions: await tx.sessions.list(),
        })),
      ).toEqual({
        nonces: 2,
        chain: [
          [0, "n1"],
          [100, "n2"],
        ],
        head: 0,
        sessions: [],
      });
    });
  }

  it('a nonce not asked about waits for its answer: "conflict" at the call, which the transaction may catch', async () => {
    const sub = await openMigrated(freshSchema());
    await sub.transaction((tx) => spend(tx, "s1", "n1"));
    const outcome = await sub.transaction(async (tx) => {
      const head = (await tx.chain.head())!;
      const error = await tx.chain
        .append(chainEntry(head.seq + 1, { prev_hash: head.entry_hash, session_id: "s1", nonce: "n1" }))
        .then(
          () => null,
          (e: unknown) => (e as SubstrateError).code,
        );
      await spend(tx, "s1", "n2");
      return error;
    });
    expect(outcome).toBe("conflict");
    expect(
      await sub.transaction(async (tx) => (await tx.chain.range(0, 10)).map((e) => [e.seq, e.nonce])),
    ).toEqual([
      [0, "n1"],
      [1, "n2"],
    ]);
  });

  it("in a batch, a fresh nonce is spent; later transactions answer has from what the batch knows", async () => {
    const sub = await openMigrated(freshSchema());
    const { result, names } = await statementNames(() =>
      inOneBatch(sub, [
        async (tx) => [await tx.nonces.has("s1", 7), await spend(tx, "s1", 7)],
        async (tx) => [
          await tx.nonces.has("s1", 7),
          await spend(tx, "s1", 7).catch((e: unknown) => (e as SubstrateError).code),
        ],
      ]),
    );
    expect(result).toEqual([
      { status: "fulfilled", value: [false, true] },
      { status: "fulfilled", value: [true, "conflict"] },
    ]);
    // The second transaction's has() came from the batch's memory; its append asked the server.
    expect(names.filter((n) => n.includes("nonces_has"))).toHaveLength(1);
    expect(
      await sub.transaction(async (tx) => [
        await tx.nonces.has("s1", 7),
        await tx.nonces.has("s1", "7"),
        await tx.chain.count(),
      ]),
    ).toEqual([true, false, 1]);
  });
});

describe("a batch does not wait for a released transaction's deferred answers", () => {
  it("the next transaction starts before the previous one's deferred answers arrive", async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    // The first transaction's session update takes 400 ms on the server.
    await admin.query(`CREATE FUNCTION "${schema}".slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.session_id = 'slow' THEN PERFORM pg_sleep(0.4); END IF;
  RETURN NEW;
END $$`);
    await admin.query(
      `CREATE TRIGGER slow BEFORE UPDATE ON "${schema}".leash_sessions FOR EACH ROW EXECUTE FUNCTION "${schema}".slow()`,
    );
    await sub.transaction((tx) => tx.sessions.insert(session("slow")));
    let firstDone = 0;
    let secondStarted = 0;
    const { result, delta } = await counted(sub, () =>
      inOneBatch(sub, [
        async (tx) => {
          const row = (await tx.sessions.get("slow"))!;
          // A write to a row it holds: resolves once written, its answer comes 400 ms later.
          await tx.sessions.update({ ...row, call_count: 1 });
          firstDone = performance.now();
        },
        async (tx) => {
          secondStarted = performance.now();
          await tx.nonces.has("fast", "n1");
          return spend(tx, "fast", "n1");
        },
      ]),
    );
    expect(result.map((r) => r.status)).toEqual(["fulfilled", "fulfilled"]);
    expect(secondStarted - firstDone).toBeLessThan(200);
    expect(delta.largestBatch).toBeGreaterThanOrEqual(2);
    expect(
      await sub.transaction(async (tx) => [
        (await tx.sessions.get("slow"))?.call_count,
        await tx.nonces.count("fast"),
      ]),
    ).toEqual([1, 1]);
  });

  it("a clash of a released transaction's deferred write rejects it alone; the others of its batch commit after running again", async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    const calls = [0, 0, 0];
    const result = await inOneBatch(sub, [
      async (tx) => {
        calls[0]!++;
        await tx.sessions.insert(session("s1"));
      },
      async (tx) => {
        calls[1]!++;
        await tx.sessions.insert(session("s2"));
        expect(await tx.nonces.has("s2", "n")).toBe(false);
        const head = await tx.chain.head();
        // Spent meanwhile by another writer, after has() answered: a clash that aborts nothing,
        // found only when the append's answer arrives.
        await spentBehindTheLock(schema, 100, "s2", "n");
        await tx.chain.append(chainEntry((head?.seq ?? -1) + 1, { session_id: "s2", nonce: "n" }));
        return true;
      },
      async (tx) => {
        calls[2]!++;
        await tx.sessions.insert(session("s3"));
      },
    ]);
    expect(result.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    const reason = (result[1] as PromiseRejectedResult).reason as SubstrateError;
    expect(reason.code).toBe("conflict");
    expect(reason.message).toMatch(/already spent/);
    expect(calls).toEqual([2, 1, 2]);
    const ids = await sub.transaction(async (tx) => (await tx.sessions.list()).map((s) => s.session_id));
    expect(ids.sort()).toEqual(["s1", "s3"]);
    expect(await sub.transaction((tx) => tx.nonces.count("s2"))).toBe(1);
  });

  for (const [name, errcode, code, rerun] of [
    ["fails the culprit alone; the others commit after running again", "23514", "corrupt", 1],
    ["of serialization re-runs the whole batch", "40001", undefined, 2],
  ] as const) {
    it(`a late statement error (a trigger raising on one session's update) ${name}; later ones are not blamed for 25P02`, async () => {
      const schema = freshSchema();
      const sub = await openMigrated(schema);
      await admin.query(`CREATE SEQUENCE "${schema}".late_seq`);
      await admin.query(`CREATE FUNCTION "${schema}".late() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.session_id = 's2' AND ('${errcode}' <> '40001' OR nextval('"${schema}".late_seq') <= 1) THEN
    RAISE EXCEPTION 'forced late failure' USING ERRCODE = '${errcode}';
  END IF;
  RETURN NEW;
END $$`);
      await admin.query(
        `CREATE TRIGGER late BEFORE UPDATE ON "${schema}".leash_sessions FOR EACH ROW EXECUTE FUNCTION "${schema}".late()`,
      );
      await sub.transaction(async (tx) => {
        for (const id of ["s1", "s2", "s3", "s4"]) await tx.sessions.insert(session(id));
      });
      const calls = [0, 0, 0, 0];
      const bump = (i: number, id: string) => async (tx: SubstrateTx) => {
        calls[i]!++;
        const row = (await tx.sessions.get(id))!;
        // A write to a row it holds: sent without waiting, so the trigger's error arrives after fn.
        await tx.sessions.update({ ...row, call_count: row.call_count + 1 });
        return "bumped";
      };
      const result = await inOneBatch(sub, [
        bump(0, "s1"),
        bump(1, "s2"),
        async (tx) => {
          calls[2]!++;
          // Meets the transaction s2's update aborted; swallowing that does not make it the culprit.
          await tx.sessions.insert(session("s5")).catch(() => undefined);
          await tx.nonces
            .has("s5", "n")
            .then(() => spend(tx, "s5", "n"))
            .catch(() => undefined);
          return "inserted";
        },
        // Still queued when the failure comes out: it runs once, in the next batch.
        bump(3, "s3"),
      ]);
      const statuses = result.map((r) => r.status);
      if (code === undefined) {
        expect(statuses).toEqual(["fulfilled", "fulfilled", "fulfilled", "fulfilled"]);
      } else {
        expect(statuses).toEqual(["fulfilled", "rejected", "fulfilled", "fulfilled"]);
        expect(((result[1] as PromiseRejectedResult).reason as SubstrateError).code).toBe(code);
      }
      expect(calls).toEqual([2, rerun, 2, 1]);
      const rows = await sub.transaction(async (tx) => await tx.sessions.list());
      expect(Object.fromEntries(rows.map((r) => [r.session_id, r.call_count]))).toEqual({
        s1: 1,
        s2: code === undefined ? 1 : 0,
        s3: 1,
        s4: 0,
        s5: 0,
      });
      expect(await sub.transaction((tx) => tx.nonces.count("s5"))).toBe(1);
    });
  }
});

describe("a batch's deferred writes, sent together", () => {
  /**
   * What an engine decision does, on session `id`: reads, then four writes the batch may hold back
   * (its entry spends the nonce). After `warm` in the same batch every read is answered from the
   * batch's memory, so it sends nothing.
   */
  const decision =
    (id: string, over: { entryId?: string } = {}): Fn =>
    async (tx) => {
      const [s, seen] = await Promise.all([tx.sessions.get(id), tx.nonces.has(id, "n")]);
      const [acct, head] = await Promise.all([tx.budgets.getAccount("a"), tx.chain.head()]);
      if (seen) throw new Error("replayed");
      await tx.budgets.updateAccount({ ...acct!, spent_usd: String(BigInt(acct!.spent_usd) + 1n) });
      await tx.sessions.update({ ...s!, call_count: s!.call_count + 1 });
      const seq = (head?.seq ?? -1) + 1;
      await tx.chain.append(
        chainEntry(seq, {
          entry_id: over.entryId ?? `e${seq}`,
          prev_hash: head?.entry_hash ?? "0".repeat(64),
          // The nonce it found unspent: the append may go out unanswered (see chain.ts).
          session_id: id,
          nonce: "n",
        }),
      );
      await tx.outbox.enqueue({ seq, entry_id: `e${seq}`, session_id: id, created_ns: T0 });
      return seq;
    };

  /** Reads (and locks) what the decisions after it read, and hands it on to them in the batch's memory. */
  const warm =
    (count: number, during?: () => Promise<unknown>): Fn =>
    async (tx) => {
      for (let i = 0; i < count; i++) {
        await Promise.all([tx.sessions.get(`s${i}`), tx.nonces.has(`s${i}`, "n")]);
      }
      await Promise.all([tx.budgets.getAccount("a"), tx.chain.head()]);
      await during?.();
      return "warm";
    };

  async function world(count: number): Promise<PostgresSubstrate> {
    const sub = await openMigrated(freshSchema());
    await sub.transaction(async (tx) => {
      await tx.budgets.insertAccount(account("a", { spent_usd: "0" }));
      for (let i = 0; i < count; i++) await tx.sessions.insert(session(`s${i}`));
    });
    return sub;
  }

  async function stored(sub: PostgresSubstrate) {
    return sub.transaction(async (tx) => ({
      spent: (await tx.budgets.getAccount("a"))!.spent_usd,
      calls: Object.fromEntries((await tx.sessions.list()).map((r) => [r.session_id, r.call_count])),
      reservations: (await tx.budgets.listReservations({})).map((r) => r.reservation_id).sort(),
      chain: (await tx.chain.range(0, 100)).map((e) => e.seq),
      outbox: (await tx.outbox.list({})).map((i) => i.seq),
      head: (await tx.chain.head())?.seq ?? null,
    }));
  }

  it("go out as one multi-row statement per kind, after the first, and land exactly as one by one", async () => {
    const sub = await world(6);
    const before = sub.stats.multiRowWrites;
    const reserve: Fn = async (tx) => {
      // Ids found absent under their key locks: inserted without waiting, then sent together.
      for (const id of ["r0", "r1", "r2"]) expect(await tx.budgets.getReservation(id)).toBeNull();
      for (const id of ["r0", "r1", "r2"]) await tx.budgets.insertReservation(reservation(id));
      return "reserved";
    };
    const { result, names } = await statementNames(() =>
      inOneBatch(sub, [warm(6), ...Array.from({ length: 6 }, (_, i) => decision(`s${i}`)), reserve]),
    );
    expect(result).toEqual([
      { status: "fulfilled", value: "warm" },
      ...Array.from({ length: 6 }, (_, i) => ({ status: "fulfilled", value: i })),
      { status: "fulfilled", value: "reserved" },
    ]);
    expect(await stored(sub)).toEqual({
      spent: "6",
      calls: { s0: 1, s1: 1, s2: 1, s3: 1, s4: 1, s5: 1 },
      reservations: ["r0", "r1", "r2"],
      chain: [0, 1, 2, 3, 4, 5],
      outbox: [0, 1, 2, 3, 4, 5],
      head: 5,
    });
    // The first decision's writes go out at once (the server has nothing else to do); the other
    // five gather while it works, and each kind then travels in one statement.
    for (const kind of [
      "reservations_insert",
      "accounts_update",
      "sessions_update",
      "chain_append",
      "outbox_enqueue",
    ]) {
      expect(
        names.filter((n) => n.includes(`${kind}_multi`)),
        kind,
      ).toHaveLength(1);
    }
    // Five decisions' sessions, chain entries (with their nonces) and outbox items; accounts.update:
    // five writes of one row become one; the three reservations.
    expect(sub.stats.multiRowWrites - before).toBe(3 * 5 + 1 + 3);
    // Each entry spent its session's nonce.
    expect(
      await sub.transaction(async (tx) => ({
        entries: (await tx.chain.range(0, 10)).map((e) => [e.session_id, e.nonce]),
        has: await Promise.all(Array.from({ length: 6 }, (_, i) => tx.nonces.has(`s${i}`, "n"))),
      })),
    ).toEqual({
      entries: Array.from({ length: 6 }, (_, i) => [`s${i}`, "n"]),
      has: Array.from({ length: 6 }, () => true),
    });
  });

  it("a transaction takes its savepoint only to send a statement, after the writes held for those before it", async () => {
    const sub = await world(1);
    const result = await inOneBatch(sub, [
      async (tx) => {
        const s = (await tx.sessions.get("s0"))!;
        // Sent at its end (the server is idle then), and still unanswered when the next one ends.
        await tx.sessions.update({ ...s, call_count: 4 });
      },
      async (tx) => {
        const s = (await tx.sessions.get("s0"))!;
        await tx.sessions.update({ ...s, call_count: 5 }); // held back: nothing sent
      },
      async (tx) => {
        await tx.sessions.insert(session("x")); // sent: the write above goes first, outside its savepoint
        throw new Error("rolled back to its savepoint");
      },
      async (tx) => [(await tx.sessions.get("s0"))!.call_count, await tx.sessions.get("x")],
    ]);
    expect(result.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "rejected", "fulfilled"]);
    expect((result[3] as PromiseFulfilledResult<unknown>).value).toEqual([5, null]);
    expect((await stored(sub)).calls).toEqual({ s0: 5 });
  });

  for (const [where, hand] of [
    ["in the read-only nonce table", false],
    ["on an entry written by hand", true],
  ] as const) {
    it(`a nonce refused inside a multi-row append (spent behind the batch's lock, ${where}) fails only its transaction; the others commit after running again`, async () => {
      const schema = freshSchema();
      const sub = await openMigrated(schema);
      await sub.transaction(async (tx) => {
        await tx.budgets.insertAccount(account("a", { spent_usd: "0" }));
        for (let i = 0; i < 5; i++) await tx.sessions.insert(session(`s${i}`));
      });
      // s2's nonce spent behind Leash's back once the batch has found it unspent (the warm-up runs
      // again in the next batch, where it is there already).
      const record = () =>
        hand
          ? spentBehindTheLock(schema, 100, "s2", "n")
          : admin.query(
              `INSERT INTO "${schema}".leash_nonces (session_id, nonce_json, recorded_ns) VALUES ('s2', '"n"', 1)
ON CONFLICT DO NOTHING`,
            );
      const calls = [0, 0, 0, 0, 0];
      const tally = (i: number): Fn => {
        const run = decision(`s${i}`);
        return (tx) => {
          calls[i]!++;
          return run(tx);
        };
      };
      const result = await inOneBatch(sub, [
        warm(5, record),
        ...Array.from({ length: 5 }, (_, i) => tally(i)),
      ]);
      expect(result.map((r) => r.status)).toEqual([
        "fulfilled",
        "fulfilled",
        "fulfilled",
        "rejected",
        "fulfilled",
        "fulfilled",
      ]);
      // Its append found the nonce spent, after its savepoint was released: it fails alone, and the
      // batch, rolled back as a whole, runs again without it.
      const reason = (result[3] as PromiseRejectedResult).reason as SubstrateError;
      expect(reason.code).toBe("conflict");
      expect(reason.message).toMatch(/nonce "n" \(string\) is already spent in session "s2"/);
      expect(calls).toEqual([2, 2, 1, 2, 2]);
      const after = await stored(sub);
      expect(after.calls).toEqual({ s0: 1, s1: 1, s2: 0, s3: 1, s4: 1 });
      expect(after).toMatchObject({
        spent: "4",
        chain: hand ? [0, 1, 2, 3, 100] : [0, 1, 2, 3],
        outbox: [0, 1, 2, 3],
        head: 3,
      });
      expect(await sub.transaction((tx) => tx.nonces.count("s2"))).toBe(1);
    });
  }

  it("a chain entry refused inside a multi-row append (its id taken) fails only its transaction", async () => {
    const sub = await world(4);
    const result = await inOneBatch(sub, [
      warm(4),
      decision("s0"),
      decision("s1"),
      decision("s2", { entryId: "e1" }),
      decision("s3"),
    ]);
    expect(result.map((r) => r.status)).toEqual([
      "fulfilled",
      "fulfilled",
      "fulfilled",
      "rejected",
      "fulfilled",
    ]);
    const reason = (result[3] as PromiseRejectedResult).reason as SubstrateError;
    expect(reason.code).toBe("conflict");
    expect(reason.message).toMatch(/already exists/);
    expect(await stored(sub)).toMatchObject({ spent: "3", chain: [0, 1, 2], outbox: [0, 1, 2], head: 2 });
  });

  it("a multi-row write the server refuses as a whole makes its transactions run again alone; only the bad one fails", async () => {
    const sub = await world(0);
    /** Appends the next entry and queues it; `bad` names its item with text PostgreSQL cannot hold. */
    const enqueue =
      (bad = false): Fn =>
      async (tx) => {
        const head = await tx.chain.head();
        const seq = (head?.seq ?? -1) + 1;
        await tx.chain.append(chainEntry(seq, { prev_hash: head?.entry_hash ?? "0".repeat(64) }));
        // PostgreSQL text cannot hold U+0000: the statement carrying this row fails, whoever else is in it.
        await tx.outbox.enqueue({
          seq,
          entry_id: bad ? "e\u0000" : `e${seq}`,
          session_id: null,
          created_ns: T0,
        });
        return seq;
      };
    const result = await inOneBatch(sub, [enqueue(), enqueue(), enqueue(), enqueue(true), enqueue()]);
    expect(result.map((r) => r.status)).toEqual([
      "fulfilled",
      "fulfilled",
      "fulfilled",
      "rejected",
      "fulfilled",
    ]);
    expect(
      await sub.transaction(async (tx) => (await tx.outbox.list({})).map((i) => [i.seq, i.entry_id])),
    ).toEqual([
      [0, "e0"],
      [1, "e1"],
      [2, "e2"],
      [3, "e3"],
    ]);
  });
});

describe("a batch's locks pass on before its log flush (earlyLockRelease); its callers hear back after it", () => {
  /** Runs `work` with every pg client's query(text) calls traced: what was sent, and when each answer came. */
  async function traced<T>(
    work: (events: string[]) => Promise<T>,
    failBarrier = false,
  ): Promise<{ result: T; events: string[] }> {
    const events: string[] = [];
    const result = await interceptingQueries(
      (config, send) => {
        const text = typeof config === "string" ? config : "";
        if (text === DURABILITY_BARRIER && failBarrier) {
          events.push("barrier refused");
          return Promise.reject(Object.assign(new Error("connection lost"), { code: "08006" }));
        }
        const answer = send();
        if (text !== "") {
          events.push(`sent ${text}`);
          void (answer as Promise<unknown>).then(
            () => events.push(`answered ${text}`),
            () => events.push(`failed ${text}`),
          );
        }
        return answer;
      },
      () => work(events),
    );
    return { result, events };
  }

  it("commits without waiting for the disk, then resolves its transactions once a durable commit after it is in", async () => {
    const sub = await openMigrated(freshSchema(), { groupCommit: { earlyLockRelease: "always" } });
    await sub.transaction((tx) => tx.sessions.insert(session("s1")));
    const { result, events } = await traced(async (events) => {
      // Two fillers keep the lane busy, so the two transactions after them share the next batch.
      const fillers = [sub.transaction(async () => "filler"), sub.transaction(async () => "filler")];
      const batch = [
        sub.transaction(async (tx) => {
          await tx.sessions.update({ ...session("s1"), call_count: 1 });
          return "written";
        }),
        sub.transaction(async (tx) => (await tx.sessions.get("s1"))!.call_count),
      ].map((p) =>
        p.then((value) => {
          events.push(`resolved ${String(value)}`);
          return value;
        }),
      );
      await Promise.all(fillers);
      return Promise.allSettled(batch);
    });
    expect(result.map((r) => (r.status === "fulfilled" ? r.value : r.reason))).toEqual(["written", 1]);
    const begin = events.findIndex((e) => e.startsWith("sent BEGIN") && e.includes("pg_try_advisory"));
    expect(events.indexOf("sent SET LOCAL synchronous_commit TO off", begin)).toBeGreaterThan(begin);
    const commit = events.indexOf("answered COMMIT", begin);
    const barrier = events.indexOf(`answered ${DURABILITY_BARRIER}`, commit);
    expect([begin, commit, barrier].every((i) => i >= 0)).toBe(true);
    expect(events.indexOf(`sent ${DURABILITY_BARRIER}`)).toBeGreaterThan(
      events.indexOf("sent COMMIT", begin),
    );
    // Both answered only after the barrier of the batch they shared (the last BEGIN … COMMIT).
    const lastBegin = events.findLastIndex(
      (e) => e.startsWith("sent BEGIN") && e.includes("pg_advisory_xact_lock("),
    );
    const lastBarrier = events.indexOf(`answered ${DURABILITY_BARRIER}`, lastBegin);
    expect(lastBarrier).toBeGreaterThan(lastBegin);
    for (const value of ["written", "1"])
      expect(events.indexOf(`resolved ${value}`)).toBeGreaterThan(lastBarrier);
  });

  it("fails its transactions as of unknown outcome when the barrier fails, though their writes did commit", async () => {
    const sub = await openMigrated(freshSchema(), { groupCommit: { earlyLockRelease: "always" } });
    await sub.transaction((tx) => tx.sessions.insert(session("s1")));
    const { result, events } = await traced(
      () =>
        inOneBatch(sub, [
          async (tx) => {
            await tx.sessions.update({ ...session("s1"), call_count: 7 });
            return "written";
          },
        ]),
      true,
    );
    expect(events).toContain("barrier refused");
    const [outcome] = result;
    expect(outcome!.status).toBe("rejected");
    const reason = (outcome as PromiseRejectedResult).reason as SubstrateError;
    expect(reason.code).toBe("io");
    expect(reason.message).toMatch(/committed, but .* whether it is durable is unknown/);
    // Committed all the same (the server did not crash here): the outcome was unknown, not a rollback.
    expect(await sub.transaction(async (tx) => (await tx.sessions.get("s1"))!.call_count)).toBe(7);
  });

  it('"never", and "auto" on a handle no other has contended with: a plain durable COMMIT, no barrier', async () => {
    for (const earlyLockRelease of ["never", "auto"] as const) {
      const sub = await openMigrated(freshSchema(), { groupCommit: { earlyLockRelease } });
      await sub.transaction((tx) => tx.sessions.insert(session("s1")));
      const { result, events } = await traced(() =>
        inOneBatch(sub, [
          async (tx) => {
            await tx.sessions.update({ ...session("s1"), call_count: 5 });
            return "written";
          },
        ]),
      );
      expect(result.map((r) => r.status)).toEqual(["fulfilled"]);
      expect(events.some((e) => e.startsWith("sent BEGIN") && e.includes("pg_try_advisory"))).toBe(true);
      expect(events.some((e) => e.includes("synchronous_commit") || e.includes(DURABILITY_BARRIER))).toBe(
        false,
      );
      expect(sub.stats.earlyLockReleases).toBe(0);
    }
  });

  it('"auto": once another holder had the batch lock when a batch began, that batch releases early', async () => {
    const schema = freshSchema();
    const sub = await openMigrated(schema);
    await sub.transaction(async (tx) => {
      for (const id of ["s1", "l1", "l2"]) await tx.sessions.insert(session(id));
    });
    await new Promise((resolve) => setTimeout(resolve, 20)); // the lane gone: the next two run alone
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => {
      openGate = resolve;
    });
    let started!: () => void;
    const running = new Promise<void>((resolve) => {
      started = resolve;
    });
    const bump = (calls: number) => async (tx: SubstrateTx) => {
      await tx.sessions.update({ ...session("s1"), call_count: calls });
      return calls;
    };
    const holder = await admin.connect();
    try {
      const { result, events } = await traced(async () => {
        // Two alone, then a batch held open until the gate (its BEGIN is not judged: the two may
        // still have held the lock), and, queued meanwhile, the batch whose BEGIN is judged.
        // Both under way (holding the lock, shared) before the batch queues: a lone one whose
        // connection came later would wait for the batch, and the batch for the gate below.
        const inside: Array<() => void> = [];
        const lonesIn = [0, 1].map(() => new Promise<void>((resolve) => inside.push(resolve)));
        const lone = [1, 2].map((calls, i) =>
          sub.transaction(async (tx) => {
            // Rows of their own: the two must be inside at once.
            await tx.sessions.update({ ...session(`l${calls}`), call_count: calls });
            const value = calls;
            inside[i]!();
            await Promise.all(lonesIn);
            return value;
          }),
        );
        await Promise.all(lonesIn);
        const held = sub.transaction(async (tx) => {
          await tx.sessions.update({ ...session("s1"), call_count: 3 });
          started();
          await gate;
          return 3;
        });
        await Promise.all([...lone, running]);
        // Another holder queues for the batch lock behind the open batch …
        const holding = holder.query(
          `BEGIN; SELECT pg_advisory_xact_lock_shared(hashtextextended('leash.batch:${schema}', 0))`,
        );
        await new Promise((resolve) => setTimeout(resolve, 30));
        const judged = sub.transaction(bump(4));
        openGate();
        // … gets it once that batch commits, and keeps it a while: the judged batch begins behind it.
        await holding;
        await new Promise((resolve) => setTimeout(resolve, 30));
        await holder.query("COMMIT");
        return Promise.all([...lone, held, judged]);
      });
      expect(result).toEqual([1, 2, 3, 4]);
      const last = events.slice(
        events.findLastIndex((e) => e.startsWith("sent BEGIN") && e.includes("pg_try_advisory")),
      );
      const set = last.indexOf("sent SET LOCAL synchronous_commit TO off");
      expect(set).toBeGreaterThanOrEqual(0);
      expect(last.indexOf(`answered ${DURABILITY_BARRIER}`, set)).toBeGreaterThan(set);
      expect(sub.stats.earlyLockReleases).toBe(1);
    } finally {
      holder.release();
    }
  });

  it("refuses an unknown earlyLockRelease", async () => {
    await expect(
      openPostgresSubstrate({
        url: DB_URL,
        schema: freshSchema(),
        groupCommit: { earlyLockRelease: "sometimes" as "auto" },
      }),
    ).rejects.toThrow(/earlyLockRelease/);
  });
});
