// Fault injection on the database itself: SIGKILL a PostgreSQL server (of the test's own) under two engine
// processes, restart it, and check that every verdict a caller was told survived, on every groupCommit setting.
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { generateKeyPair, verifyChain } from "@leash/chain";
import type { ChainEntryRecord } from "@leash/core";
import { openPostgresSubstrate, type PostgresSubstrateOptions } from "@leash/substrate-postgres";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatReport, recover } from "../src/index.js";
import { ensureBuilt } from "./support.js";
import { ThrowawayCluster } from "./throwaway-cluster.js";

const WORKER = fileURLToPath(new URL("./server-crash-worker.mjs", import.meta.url));
const ROUNDS = 10;
const PROCESSES = 2;
const CALLERS = 8;
const TTL_MS = 200;
/** Seeded, so a failure can be replayed: LEASH_CRASH_SEED=<seed printed in the failure>. */
const SEED = Number(process.env.LEASH_CRASH_SEED ?? Date.now() % 1_000_000);

/** Every groupCommit setting that ships; undefined is the default ("auto" early lock release). */
const SETTINGS: ReadonlyArray<[string, PostgresSubstrateOptions["groupCommit"]]> = [
  ["default", undefined],
  ['earlyLockRelease "always"', { earlyLockRelease: "always" }],
  ['earlyLockRelease "never"', { earlyLockRelease: "never" }],
  ["groupCommit false", false],
];

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Load {
  child: ChildProcess;
  stdout: string;
  stderr: string;
  ready: Promise<void>;
  ended: Promise<void>;
}

/**
 * Spawns a load process, which loads its modules and then waits for `go` (the schema to work on):
 * started while the server restarts after the previous crash, its boot costs the round no time.
 */
function spawnLoad(url: string, tag: string, options: object, privateKeyPem: string): Load {
  const child = spawn(process.execPath, [WORKER, url, JSON.stringify({ tag, ...options })], {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, LEASH_SIGNING_KEY: privateKeyPem },
  });
  const load = { child, stdout: "", stderr: "" } as Load;
  load.ready = new Promise((resolve, reject) => {
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      load.stdout += chunk;
      if (load.stdout.includes('{"ready":true}\n')) resolve();
    });
    child.on("close", () => reject(new Error(`load ${tag} ended before it was ready:\n${load.stderr}`)));
  });
  load.ready.catch(() => undefined);
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
    load.stderr += chunk;
  });
  child.stdin!.on("error", () => undefined);
  load.ended = new Promise((resolve) => child.on("close", () => resolve()));
  return load;
}

/** Sends a spawned load its schema: it opens the store, registers its sessions and starts its callers. */
function go(load: Load, schema: string): void {
  load.child.stdin!.end(`${JSON.stringify({ schema })}\n`);
}

/** The substrate counters a load process printed as it ended. */
function statsOf(load: Load): { earlyLockReleases: number } {
  const line = load.stdout.split("\n").find((l) => l.startsWith('{"stats":'));
  if (line === undefined) throw new Error(`a load process ended without its stats:\n${load.stderr}`);
  return (JSON.parse(line) as { stats: { earlyLockReleases: number } }).stats;
}

/** What the load's callers were told: "seq hash verdict" lines (an unterminated last line was never told whole). */
function toldVerdicts(stdout: string): { seq: number; hash: string; verdict: string }[] {
  const lines = stdout.split("\n");
  lines.pop();
  return lines
    .filter((line) => line !== "" && !line.startsWith("{"))
    .map((line) => {
      const [seq, hash, verdict] = line.split(" ");
      return { seq: Number(seq), hash: hash!, verdict: verdict! };
    });
}

describe("a PostgreSQL server crash under load", () => {
  const key = generateKeyPair();
  let cluster: ThrowawayCluster | undefined;

  beforeAll(async () => {
    ensureBuilt();
    cluster = await ThrowawayCluster.create();
    await cluster.start();
  }, 120_000);
  afterAll(async () => {
    await cluster?.destroy();
  }, 60_000);

  describe.each(SETTINGS)("with %s", (label, groupCommit) => {
    const random = mulberry32(SEED + SETTINGS.findIndex(([l]) => l === label));

    it(`${ROUNDS} SIGKILLs of the server: every verdict told is in the verified chain with its hash and outbox item, no hold leaks`, async () => {
      const db = cluster!;
      // An earlier setting's test may have failed with the server down.
      if (!db.running) await db.start();
      const totals = { told: 0, chain: 0, expired: 0, earlyLockReleases: 0 };
      const options = {
        callers: CALLERS,
        sessions: 4,
        reservationTtlMs: TTL_MS,
        ...(groupCommit === undefined ? {} : { groupCommit }),
      };
      const spawnLoads = () =>
        Array.from({ length: PROCESSES }, (_, p) => spawnLoad(db.url, `p${p}`, options, key.privateKeyPem));
      let next = spawnLoads();
      // Whatever happens, no load process outlives the test.
      const spawned: Load[] = [...next];
      try {
        for (let round = 0; round < ROUNDS; round++) {
          const schema = `crash_${label.replace(/\W+/g, "_").toLowerCase()}_${round}`;
          const context = `seed ${SEED}, ${label}, round ${round}`;
          const setup = await openPostgresSubstrate({ url: db.url, schema, poolSize: 1 });
          await setup.migrate();
          await setup.close();

          const loads = next;
          for (const load of loads) go(load, schema);
          const watchdog = setTimeout(() => {
            for (const load of loads) load.child.kill("SIGKILL");
          }, 60_000);
          try {
            await Promise.all(loads.map((load) => load.ready));
            // Mid-load: both processes' batches contend for the batch lock by now.
            await sleep(300 + Math.floor(random() * 1000));
            await db.crash();
            await Promise.all(loads.map((load) => load.ended));
          } finally {
            clearTimeout(watchdog);
          }
          for (const load of loads) {
            expect(load.child.exitCode, `${context}: a load process died on its own:\n${load.stderr}`).toBe(
              0,
            );
          }
          totals.earlyLockReleases += loads.reduce((sum, load) => sum + statsOf(load).earlyLockReleases, 0);
          if (round + 1 < ROUNDS) {
            next = spawnLoads();
            spawned.push(...next);
          }

          await db.start();
          const substrate = await openPostgresSubstrate({ url: db.url, schema, poolSize: 2 });
          try {
            const chain: ChainEntryRecord[] = await substrate.transaction((tx) =>
              tx.chain.range(0, 10_000_000),
            );
            const told = loads.flatMap((load) => toldVerdicts(load.stdout));
            expect(told.length, `${context}: the load told no verdict before the crash`).toBeGreaterThan(0);
            const lost = told.filter((t) => chain[t.seq]?.entry_hash !== t.hash);
            expect(
              lost.map((t) => `${t.seq} ${t.hash.slice(0, 12)} ${t.verdict}`),
              `${context}: ${lost.length} of ${told.length} verdicts told are not in the chain as told (its head is now seq ${chain.length - 1})`,
            ).toEqual([]);
            const verified = await verifyChain(chain, { publicKeys: [key.publicKeyHex] });
            expect(verified.ok, `${context}: the chain does not verify: ${JSON.stringify(verified)}`).toBe(
              true,
            );

            // Holds the dead processes left behind: past their TTL now, recovery must charge every one.
            await sleep(TTL_MS);
            const report = await recover(substrate, {
              publicKeys: [key.publicKeyHex],
              signer: key.signer,
              repair: true,
            });
            expect(report.ok, `${context}:\n${formatReport(report)}`).toBe(true);
            // The engine enqueues in the append's transaction: no entry lost its outbox item, or kept one alone.
            expect(report.outbox.missing, context).toEqual([]);
            expect(report.outbox.orphans, context).toEqual([]);
            const pending = await substrate.transaction((tx) =>
              tx.budgets.listReservations({ status: "PENDING" }),
            );
            expect(pending, `${context}: holds still pending after recovery`).toEqual([]);
            const reserved = await reservedTotals(db.url, schema);
            expect(reserved, `${context}: accounts still hold budget no reservation accounts for`).toEqual(
              [],
            );
            totals.told += told.length;
            totals.chain += chain.length;
            totals.expired += report.reservations.expired;
          } finally {
            await substrate.close();
          }
          await dropSchema(db.url, schema);
        }
      } finally {
        for (const load of spawned) {
          if (load.child.exitCode === null && load.child.signalCode === null) load.child.kill("SIGKILL");
        }
        await Promise.all(spawned.map((load) => load.ended));
      }
      // The test tested something: verdicts were told, holds leaked and were charged.
      expect(totals.told).toBeGreaterThan(ROUNDS * 5);
      expect(totals.expired).toBeGreaterThan(0);
      // And the commit path the setting names: two processes contend, so "auto" releases early too.
      const early =
        groupCommit === undefined || (groupCommit !== false && groupCommit.earlyLockRelease !== "never");
      if (early)
        expect(totals.earlyLockReleases, "batches that released their locks early").toBeGreaterThan(0);
      else expect(totals.earlyLockReleases, "batches that released their locks early").toBe(0);
      console.log(
        `[server-crash ${label}] seed ${SEED}: ${ROUNDS} server kills, ${totals.told} verdicts told, ` +
          `${totals.chain} chain entries, ${totals.expired} leaked holds charged by recovery, ` +
          `${totals.earlyLockReleases} early lock releases`,
      );
    }, 300_000);
  });
});

/** Accounts whose reserved amount is not zero (after recovery released every hold). */
async function reservedTotals(url: string, schema: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ account_id: string; reserved_usd: string }>(
      `SELECT account_id, reserved_usd FROM "${schema}".leash_budget_accounts WHERE reserved_usd::numeric <> 0`,
    );
    return rows.map((r) => `${r.account_id}: ${r.reserved_usd}`);
  } finally {
    await client.end();
  }
}

async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}
