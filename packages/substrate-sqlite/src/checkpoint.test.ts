// Tests of background WAL checkpoints: the worker copies and restarts the WAL, the data stays whole,
// and switching it off or breaking it leaves a working store. Group commit itself: sqlite.test.ts.
import { existsSync, statSync } from "node:fs";
import { dirname } from "node:path";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { freshDbPath, session } from "../test/support.js";
import { WalCheckpointer } from "./checkpointer.js";
import { resolveOptions } from "./options.js";
import { openSqliteSubstrate, type SqliteSubstrate } from "./substrate.js";
import { parseSqliteUrl } from "./url.js";

const open: SqliteSubstrate[] = [];
afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
});

async function openMigrated(path: string, extra: Partial<Parameters<typeof openSqliteSubstrate>[0]> = {}) {
  const substrate = await openSqliteSubstrate({ path, ...extra });
  open.push(substrate);
  await substrate.migrate();
  return substrate;
}

/** Sessions s-<first> … with ~`bytes` of state each (overflow pages), one COMMIT each. */
async function writeSessionsFrom(sub: SqliteSubstrate, first: number, count: number, bytes: number) {
  const filler = "x".repeat(bytes);
  for (let i = first; i < first + count; i++) {
    await sub.transaction((tx) => tx.sessions.insert(session(`s-${i}`, { state: { filler, i } })));
  }
}

function writeSessions(sub: SqliteSubstrate, count: number, bytes: number): Promise<void> {
  return writeSessionsFrom(sub, 0, count, bytes);
}

function walBytes(path: string): number {
  return existsSync(`${path}-wal`) ? statSync(`${path}-wal`).size : 0;
}

describe("background checkpoints", () => {
  it("copy the WAL into the file and start it over, so it stays far below what was written", async () => {
    const path = freshDbPath();
    const sub = await openMigrated(path, { checkpointRestartFrames: 64, checkpointIntervalMs: 2 });
    // ~12 MB of overflow pages: without checkpoints the WAL would hold all of it. (The first 64
    // commits, before the worker starts, and those while it starts, only grow it.)
    await writeSessions(sub, 600, 20_000);
    expect(sub.stats.walCheckpoints).toBeGreaterThan(0);
    expect(sub.stats.walRestarts).toBeGreaterThan(0);
    expect(sub.stats.checkpointWorkerFailures).toBe(0);
    // Frames in the WAL now, since it last started over: all ~4,000 written had it never restarted.
    const probe = new Database(path);
    const [{ log }] = probe.pragma("wal_checkpoint(PASSIVE)") as Array<{ log: number }>;
    probe.close();
    expect(log).toBeLessThan(1_500);
    expect(walBytes(path)).toBeLessThan(12_000_000);

    await sub.close();
    // Both connections closed: the last one checkpointed the whole WAL and removed it.
    expect(existsSync(`${path}-wal`)).toBe(false);
    const raw = new Database(path, { readonly: true });
    expect(raw.prepare("SELECT count(*) FROM leash_sessions").pluck().get()).toBe(600);
    raw.close();
  });

  it("start only once a handle has committed 64 times (a short-lived one never starts a thread), and stay quiet when idle", async () => {
    const path = freshDbPath();
    const sub = await openMigrated(path, { checkpointIntervalMs: 1 });
    await writeSessions(sub, 62, 100);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(sub.stats.commits).toBe(62);
    expect(sub.stats.walCheckpoints).toBe(0);
    await writeSessionsFrom(sub, 62, 4, 100);
    await expect.poll(() => sub.stats.walCheckpoints, { timeout: 10_000 }).toBeGreaterThan(0);
    // Idle now: the worker still ticks every millisecond, but tells the writer nothing.
    await new Promise((resolve) => setTimeout(resolve, 100));
    const settled = sub.stats.walCheckpoints;
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(sub.stats.walCheckpoints).toBe(settled);
  });

  it("never wait on a reader that holds an old snapshot: writes go on, the WAL restarts after it ends", async () => {
    const path = freshDbPath();
    const sub = await openMigrated(path, { checkpointRestartFrames: 32, checkpointIntervalMs: 1 });
    await writeSessions(sub, 10, 8_000);
    const reader = new Database(path, { readonly: true });
    const count = reader.prepare("SELECT count(*) FROM leash_sessions").pluck();
    try {
      reader.exec("BEGIN");
      expect(count.get()).toBe(10);
      // The open snapshot pins the WAL: no RESTART can finish while it lasts.
      const restartsBefore = sub.stats.walRestarts;
      for (let i = 10; i < 150; i++) {
        await sub.transaction((tx) =>
          tx.sessions.insert(session(`s-${i}`, { state: { filler: "y".repeat(8_000) } })),
        );
      }
      expect(count.get()).toBe(10);
      expect(sub.stats.walRestarts).toBe(restartsBefore);
      reader.exec("COMMIT");
      expect(count.get()).toBe(150);
      // The worker asks between ticks and the writer pauses between batches: write until it has.
      let written = 150;
      while (sub.stats.walRestarts === restartsBefore && written < 1_150) {
        await writeSessionsFrom(sub, written, 10, 8_000);
        written += 10;
      }
      expect(sub.stats.walRestarts).toBeGreaterThan(restartsBefore);
      expect(count.get()).toBe(written);
    } finally {
      if (reader.inTransaction) reader.exec("COMMIT");
      reader.close();
    }
  });

  it("are SQLite's own, inside COMMIT, with backgroundCheckpoints false", async () => {
    const path = freshDbPath();
    const sub = await openMigrated(path, { backgroundCheckpoints: false });
    await writeSessions(sub, 300, 20_000);
    expect(sub.stats.walCheckpoints).toBe(0);
    expect(sub.stats.walRestarts).toBe(0);
    // SQLite restarted the WAL itself after ~1,000 pages instead of keeping all ~6 MB.
    expect(walBytes(path)).toBeLessThan(6_000_000);
    expect(await sub.transaction((tx) => tx.sessions.get("s-299"))).not.toBeNull();
  });
});

describe("a checkpoint worker that cannot work", () => {
  it("reports its failure once and never leaves a caller waiting", async () => {
    const failures: string[] = [];
    // A directory is no database: the worker's open fails.
    const checkpointer = new WalCheckpointer(
      {
        path: dirname(freshDbPath()),
        synchronous: "FULL",
        fullfsync: false,
        restartFrames: 1,
        intervalMs: 1,
      },
      (message) => failures.push(message),
    );
    await expect.poll(() => failures.length, { timeout: 10_000 }).toBe(1);
    await checkpointer.pauseIfWanted();
    await checkpointer.close();
    expect(failures).toHaveLength(1);
  });
});

describe("checkpoint options", () => {
  it("default to background checkpoints and refuse what is not a setting", () => {
    expect(resolveOptions({ path: "a.db" }).backgroundCheckpoints).toEqual({
      restartFrames: 16_384,
      intervalMs: 100,
    });
    expect(resolveOptions({ path: "a.db", backgroundCheckpoints: false }).backgroundCheckpoints).toBe(false);
    expect(() => resolveOptions({ path: "a.db", backgroundCheckpoints: "yes" as never })).toThrow(TypeError);
    expect(() => resolveOptions({ path: "a.db", checkpointRestartFrames: 0 })).toThrow(RangeError);
    expect(() => resolveOptions({ path: "a.db", checkpointIntervalMs: 1.5 })).toThrow(RangeError);
  });

  it("are read from the store URL", () => {
    expect(parseSqliteUrl("sqlite:a.db?background_checkpoints=off")).toMatchObject({
      backgroundCheckpoints: false,
    });
    expect(parseSqliteUrl("sqlite:a.db?checkpoint_restart_frames=500")).toMatchObject({
      checkpointRestartFrames: 500,
    });
    expect(() => parseSqliteUrl("sqlite:a.db?checkpoint_restart_frames=0")).toThrow(/at least 1/);
    expect(() => parseSqliteUrl("sqlite:a.db?background_checkpoints=maybe")).toThrow(/on or off/);
  });
});
