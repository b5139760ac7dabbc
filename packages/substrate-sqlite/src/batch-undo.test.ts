// Property test of group commit without savepoints: whatever mix of transactions fails, and when, in
// a batch, each caller hears its own last run's outcome and the file holds exactly the successful ones.

import { spendIn } from "@leash/substrate-contract";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { freshDbPath, session } from "../test/support.js";
import { openSqliteSubstrate, type SqliteSubstrate } from "./substrate.js";

type Step = "ok" | "fails before writing" | "fails after writing";

const open: SqliteSubstrate[] = [];
afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
});

const step = fc.constantFrom<Step>("ok", "ok", "fails before writing", "fails after writing");
/** What a transaction does on its first run, and on any run after that. */
const plan = fc.tuple(step, step);
const RUNS = Number(process.env.LEASH_PROPERTY_RUNS ?? 100);

describe("group commit without savepoints", () => {
  it("settles every transaction by its last run, stores exactly the successful ones, runs none more than twice", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(plan, { minLength: 1, maxLength: 24 }),
        fc.integer({ min: 1, max: 8 }),
        async (plans, maxBatch) => {
          const sub = await openSqliteSubstrate({
            path: freshDbPath(),
            groupCommit: { maxBatch, maxBatchMs: 1000 },
          });
          open.push(sub);
          await sub.migrate();
          const runs = plans.map(() => 0);
          const results = await Promise.allSettled(
            plans.map(([first, later], i) =>
              sub.transaction(async (tx) => {
                const run = ++runs[i]!;
                const what = run === 1 ? first : later;
                if (what === "fails before writing") throw new Error(`${i} before`);
                await tx.sessions.insert(session(`s${i}`));
                await spendIn(tx, `s${i}`, `n${i}`);
                if (what === "fails after writing") throw new Error(`${i} after`);
                return i;
              }),
            ),
          );
          const last = plans.map(([first, later], i) => (runs[i] === 1 ? first : later));
          expect(runs.every((n) => n === 1 || n === 2)).toBe(true);
          expect(results.map((r) => r.status)).toEqual(
            last.map((what) => (what === "ok" ? "fulfilled" : "rejected")),
          );
          const succeeded = plans.map((_, i) => i).filter((i) => last[i] === "ok");
          const stored = await sub.transaction(async (tx) => ({
            sessions: (await tx.sessions.list())
              .map((s) => Number(s.session_id.slice(1)))
              .sort((a, b) => a - b),
            nonces: await Promise.all(plans.map((_, i) => tx.nonces.count(`s${i}`))),
          }));
          expect(stored.sessions).toEqual(succeeded);
          expect(stored.nonces).toEqual(last.map((what) => (what === "ok" ? 1 : 0)));
          // Every run after the first is one the stats call a rerun.
          expect(sub.stats.reruns).toBe(runs.reduce((sum, n) => sum + n - 1, 0));
        },
      ),
      { numRuns: RUNS },
    );
  }, 600_000); // for long runs with LEASH_PROPERTY_RUNS; the default 100 take about a second
});
