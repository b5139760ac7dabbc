// Multi-process safety: four OS processes migrate one fresh file at once and race read-modify-write on it.
// The children run the built dist (compiled here first, so it is never stale); nothing is skipped.
import { execFileSync, spawn } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import { beforeAll, describe, expect, it } from "vitest";
import { freshDbPath } from "../test/support.js";
import { MIGRATIONS } from "./schema.js";

const packageDir = fileURLToPath(new URL("..", import.meta.url));
const worker = fileURLToPath(new URL("../test/increment-worker.mjs", import.meta.url));

const PROCESSES = 4;
const TRANSACTIONS = 200;
const CALLERS_PER_PROCESS = 4;

interface WorkerReport {
  created: boolean;
  nonceWins: number;
  stats: { committed: number; commits: number; rolledBack: number; largestBatch: number };
}

function runWorker(path: string, startAt: number): Promise<WorkerReport> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [worker, path, String(TRANSACTIONS), String(CALLERS_PER_PROCESS), String(startAt)],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      err += chunk.toString();
    });
    child.on("error", reject);
    child.on("close", (code) => {
      if (code === 0) resolve(JSON.parse(out) as WorkerReport);
      else reject(new Error(`worker exited with ${String(code)}: ${err}`));
    });
  });
}

beforeAll(() => {
  // Build dist from the current source: the children cannot run TypeScript themselves.
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  execFileSync(process.execPath, [tsc, "-p", packageDir], { stdio: "pipe" });
}, 120_000);

describe("several processes on one file", () => {
  it(`${PROCESSES} processes × ${TRANSACTIONS} get → update increments lose nothing, accept each nonce once and chain gaplessly`, async () => {
    const path = freshDbPath();
    // Migration and account creation race as the processes boot; the increments start together.
    const startAt = Date.now() + 1500;
    const reports = await Promise.all(Array.from({ length: PROCESSES }, () => runWorker(path, startAt)));

    expect(reports.filter((r) => r.created)).toHaveLength(1);
    // Each worker claimed nonces 0..199; across all of them each nonce was spent exactly once.
    expect(reports.reduce((sum, r) => sum + r.nonceWins, 0)).toBe(TRANSACTIONS);
    for (const r of reports) expect(r.stats.committed).toBe(TRANSACTIONS + (r.created ? 1 : 0));

    const db = new Database(path, { readonly: true });
    const spent = db
      .prepare("SELECT spent_usd FROM leash_budget_accounts WHERE account_id = 'shared'")
      .pluck()
      .get();
    const nonces = db
      .prepare("SELECT COUNT(*) FROM leash_chain WHERE session_id = 'shared-session' AND nonce IS NOT NULL")
      .pluck()
      .get();
    const versions = db.prepare("SELECT version FROM leash_schema_version ORDER BY version").pluck().all();
    const chain = db
      .prepare("SELECT seq, entry_hash, prev_hash FROM leash_chain ORDER BY seq")
      .all() as Array<{
      seq: number;
      entry_hash: string;
      prev_hash: string;
    }>;
    db.close();
    expect(spent).toBe(String(PROCESSES * TRANSACTIONS));
    expect(nonces).toBe(TRANSACTIONS);
    expect(versions).toEqual(MIGRATIONS.map((m) => m.version));
    // Every transaction appended after the head it read, across processes: one gapless, linked chain.
    expect(chain.map((e) => e.seq)).toEqual(Array.from({ length: PROCESSES * TRANSACTIONS }, (_, i) => i));
    for (const [i, e] of chain.entries()) {
      expect(e.prev_hash).toBe(i === 0 ? "0".repeat(64) : chain[i - 1]!.entry_hash);
    }
  }, 60_000);
});
