// Fault injection: SIGKILL an engine under load (and a relay mid-delivery) again and again, on SQLite and
// PostgreSQL, then recover and check that no verdict a client received is lost and every entry ships once.
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { generateKeyPair, verifyChain } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { createEngine } from "@leash/engine";
import { createRelay, openFileSink } from "@leash/relay";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  assertRecovered,
  fileCheckpointStore,
  formatReport,
  type RecoveryReport,
  recover,
} from "../src/index.js";
import { ensureBuilt, type Kind, openStore, type TestStore } from "./support.js";

const WORKER = fileURLToPath(new URL("./crash-worker.mjs", import.meta.url));
const KILLS = 20;
const RELAY_KILLS = 6;
const TTL_MS = 100;
/** Seeded, so a failure can be replayed: LEASH_CRASH_SEED=<seed printed in the failure>. */
const SEED = Number(process.env.LEASH_CRASH_SEED ?? Date.now() % 1_000_000);

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

/** The complete lines of a stream cut off at a random byte: the last, unterminated one is dropped. */
function completeLines(text: string): string[] {
  const lines = text.split("\n");
  lines.pop();
  return lines.filter((l) => l.trim() !== "");
}

interface WorkerRun {
  stdout: string;
  stderr: string;
  ready: boolean;
  /** When the kill was sent, in ms after the spawn. */
  killedAtMs: number | null;
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** When to SIGKILL: `delayMs` after the spawn, after the worker says it is ready, or after its n-th batch. */
type KillAt = { delayMs: number; after: "spawn" | "ready" | { batches: number } };

/** Runs the worker and SIGKILLs it as `kill` says; null: let it exit on its own. */
function runWorker(args: string[], privateKeyPem: string, kill: KillAt | null): Promise<WorkerRun> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child: ChildProcess = spawn(process.execPath, [WORKER, ...args], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, LEASH_SIGNING_KEY: privateKeyPem },
    });
    const run: WorkerRun = {
      stdout: "",
      stderr: "",
      ready: false,
      killedAtMs: null,
      code: null,
      signal: null,
    };
    let timer: NodeJS.Timeout | undefined;
    const schedule = () => {
      if (kill === null || timer !== undefined) return;
      timer = setTimeout(() => {
        run.killedAtMs = performance.now() - started;
        child.kill("SIGKILL");
      }, kill.delayMs);
    };
    if (kill?.after === "spawn") schedule();
    const watchdog = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      run.stdout += chunk;
      if (!run.ready && run.stdout.includes('{"ready":true}\n')) {
        run.ready = true;
        if (kill?.after === "ready") schedule();
      }
      const after = kill?.after;
      if (typeof after === "object" && run.stdout.includes(`{"batch":${after.batches}}\n`)) schedule();
    });
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
      run.stderr += chunk;
    });
    child.on("error", reject);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      clearTimeout(watchdog);
      run.code = code;
      run.signal = signal;
      resolve(run);
    });
  });
}

const readChain = (substrate: Substrate): Promise<ChainEntryRecord[]> =>
  substrate.transaction((tx) => tx.chain.range(0, 10_000_000));

function ndjsonEntries(path: string): { entry_id: string; entry_hash: string }[] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return [];
  }
  return completeLines(text).map((line) => JSON.parse(line) as { entry_id: string; entry_hash: string });
}

/** Every chain entry is in the file exactly once, byte-identical hash for its id. */
function expectExactlyOnce(chain: readonly ChainEntryRecord[], path: string): void {
  const delivered = ndjsonEntries(path);
  const ids = delivered.map((e) => e.entry_id);
  expect(new Set(ids).size, "no entry written twice").toBe(ids.length);
  expect(ids.length).toBe(chain.length);
  const byId = new Map(delivered.map((e) => [e.entry_id, e.entry_hash]));
  const wrong = chain.filter((e) => byId.get(e.entry_id) !== e.entry_hash).map((e) => e.seq);
  expect(wrong, "entries missing from the file or with another hash").toEqual([]);
}

describe.each(["sqlite", "postgres"] as const)("crash recovery on %s", (kind: Kind) => {
  const random = mulberry32(SEED + (kind === "sqlite" ? 1 : 2));
  const between = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  const key = generateKeyPair();
  const stores: TestStore[] = [];

  beforeAll(() => ensureBuilt(), 120_000);
  afterAll(async () => {
    for (const s of stores) await s.close();
  });

  it(`${KILLS} SIGKILLs mid-evaluation: every received verdict is in the verified chain, no hold outlives its TTL, the relay ships each entry once`, async () => {
    const store = await openStore(kind);
    stores.push(store);
    const url = store.url!;
    const checkpointStore = fileCheckpointStore(join(store.dir, "checkpoint.json"));
    const received = new Map<number, { hash: string; iteration: number }>();
    const sinkPath = join(store.dir, "audit.ndjson");
    const sink = await openFileSink({ path: sinkPath });
    const relay = createRelay({ substrate: store.substrate, sink, relayId: "test-relay", batchSize: 200 });
    const totals = { lines: 0, expired: 0, startupKills: 0, emptyRuns: 0, recoveryMs: 0 };
    let last: RecoveryReport | undefined;

    for (let iteration = 0; iteration < KILLS; iteration++) {
      const context = `seed ${SEED}, ${kind}, iteration ${iteration}`;
      // Every fifth kill is timed from the spawn: it may land in startup, migration or registration.
      const fromSpawn = iteration % 5 === 4;
      const delayMs = fromSpawn ? between(0, 400) : between(100, 600);
      const run = await runWorker(
        ["engine", url, JSON.stringify({ sessions: 4, callers: 8, reservationTtlMs: TTL_MS })],
        key.privateKeyPem,
        { delayMs, after: fromSpawn ? "spawn" : "ready" },
      );
      expect(run.signal, `${context}: the worker died on its own:\n${run.stderr}`).toBe("SIGKILL");
      expect(run.stderr, context).toBe("");
      if (fromSpawn && !run.ready) totals.startupKills++;

      const lines = completeLines(run.stdout)
        .map((l) => JSON.parse(l) as { seq?: number; hash: string; verdict: string })
        .filter((l) => l.seq !== undefined);
      if (lines.length === 0) totals.emptyRuns++;
      totals.lines += lines.length;
      for (const line of lines) {
        expect(received.has(line.seq!), `${context}: seq ${line.seq} answered twice`).toBe(false);
        received.set(line.seq!, { hash: line.hash, iteration });
      }

      // Let every hold the dead worker left behind run past its TTL (plus a little for clock skew
      // between the two processes' epoch clocks).
      await sleep(TTL_MS + 20);
      const started = performance.now();
      const report = await recover(store.substrate, {
        publicKeys: [key.publicKeyHex],
        signer: key.signer,
        checkpointStore,
        storeUrl: url,
        repair: true,
      });
      totals.recoveryMs += performance.now() - started;
      last = report;
      expect(report.ok, `${context}:\n${formatReport(report)}`).toBe(true);
      assertRecovered(report);
      expect(report.outbox.orphans, context).toEqual([]);
      // The engine enqueues in the append's transaction: a kill can never separate the two.
      expect(report.outbox.missing, context).toEqual([]);
      totals.expired += report.reservations.expired;

      const chain = await readChain(store.substrate);
      // Recovery verified what was there, then appended only its own signed entries.
      expect(chain.length, context).toBe(
        report.chain.count + report.reservations.expired + report.sessions.markedStale.length,
      );
      const lost = [...received].filter(([seq, { hash }]) => chain[seq]?.entry_hash !== hash);
      expect(lost, `${context}: verdicts received but not in the chain as received`).toEqual([]);
      const pending = await store.substrate.transaction((tx) =>
        tx.budgets.listReservations({ status: "PENDING" }),
      );
      expect(
        pending.filter((r) => r.expires_ns <= report.startedNs),
        `${context}: holds past their TTL after recovery`,
      ).toEqual([]);
      expect(pending, `${context}: the dead worker's holds all expire within the wait`).toEqual([]);
      // Ship a little between crashes, so the final drain starts from a half-delivered outbox.
      await relay.runOnce();
    }

    // Deliver the rest, to completion.
    for (;;) {
      const round = await relay.runOnce();
      const counts = await store.substrate.transaction((tx) => tx.outbox.counts());
      if (round.claimed === 0 && counts.PENDING === 0) break;
    }
    await sink.close();
    const chain = await readChain(store.substrate);
    expect((await verifyChain(chain, { publicKeys: [key.publicKeyHex] })).ok).toBe(true);
    expect(await store.substrate.transaction((tx) => tx.outbox.counts())).toEqual({
      PENDING: 0,
      DELIVERED: chain.length,
      DEAD: 0,
    });
    expectExactlyOnce(chain, sinkPath);
    // The test tested something: verdicts were received, holds leaked and were charged.
    expect(totals.lines).toBeGreaterThan(KILLS * 5);
    expect(totals.expired).toBeGreaterThan(0);
    console.log(
      `[crash ${kind}] seed ${SEED}: ${KILLS} kills (${totals.startupKills} during startup, ${totals.emptyRuns} before any verdict), ` +
        `${totals.lines} verdicts received, chain ${chain.length} entries, ${totals.expired} leaked holds expired, ` +
        `recovery ${(totals.recoveryMs / KILLS).toFixed(0)} ms on average (last: ${last?.chain.count} entries verified)`,
    );
  }, 150_000);

  it(`${RELAY_KILLS} SIGKILLs of a relay mid-delivery: after restarts every entry is in the file exactly once`, async () => {
    const store = await openStore(kind);
    stores.push(store);
    const url = store.url!;
    // A chain to ship: 8 concurrent callers through an in-process engine.
    const engine = createEngine({ substrate: store.substrate, signer: key.signer });
    const sessions = await Promise.all(
      [0, 1, 2, 3].map(
        async (k) => (await engine.register({ agent_id: "a", config: {}, session_id: `r${k}` })).session_id,
      ),
    );
    await Promise.all(
      Array.from({ length: 8 }, async (_, c) => {
        for (let i = 0; i < 250; i++) {
          await engine.evaluate({
            session_id: sessions[(c + i) % 4]!,
            tool_name: "t",
            params: { c, i },
            nonce: `${c}:${i}`,
          });
        }
      }),
    );
    const chain = await readChain(store.substrate);
    const file = join(store.dir, "relay.ndjson");
    const delivered: number[] = [];
    let released = 0;

    for (let k = 0; k < RELAY_KILLS; k++) {
      const context = `seed ${SEED}, ${kind}, relay kill ${k}`;
      // Even kills: a stable relay id with a long lease, freed by recovery's leaseOwner on restart.
      // Odd kills: a fresh id with a short lease, which the next relay has to wait out.
      const stable = k % 2 === 0;
      const relayId = stable ? "relay-stable" : `relay-${k}`;
      // After 1–25 batches of 10 (never the whole chain), plus up to 15 ms: the kill lands anywhere
      // in a round — claiming, writing, fsyncing or acknowledging.
      const run = await runWorker(
        ["relay", url, JSON.stringify({ file, relayId, batchSize: 10, leaseMs: stable ? 60_000 : 300 })],
        key.privateKeyPem,
        { delayMs: between(0, 15), after: { batches: between(1, 25) } },
      );
      expect(run.signal, `${context}: the relay died on its own:\n${run.stderr}`).toBe("SIGKILL");
      const sofar = ndjsonEntries(file).map((e) => e.entry_id);
      expect(new Set(sofar).size, `${context}: an entry written twice`).toBe(sofar.length);
      delivered.push(sofar.length);
      if (stable) {
        const report = await recover(store.substrate, {
          publicKeys: [key.publicKeyHex],
          signer: key.signer,
          storeUrl: url,
          leaseOwner: "relay-stable",
        });
        expect(report.ok, `${context}:\n${formatReport(report)}`).toBe(true);
        released += report.outbox.releasedLeases;
        const held = await store.substrate.transaction((tx) => tx.outbox.list({ status: "PENDING" }));
        expect(held.filter((i) => i.claimed_by === "relay-stable" && i.lease_until_ns !== null)).toEqual([]);
      }
    }

    const final = await runWorker(
      [
        "relay",
        url,
        JSON.stringify({ file, relayId: "relay-final", batchSize: 50, leaseMs: 300, drain: true }),
      ],
      key.privateKeyPem,
      null,
    );
    expect(final.code, final.stderr).toBe(0);
    expect(final.stdout).toContain('{"drained":true}');
    expectExactlyOnce(chain, file);
    // Every kill landed with part of the chain shipped: relays really were killed mid-delivery.
    expect(delivered.every((n, k) => n > 0 && n < chain.length && n >= (delivered[k - 1] ?? 0))).toBe(true);
    console.log(
      `[relay-crash ${kind}] seed ${SEED}: ${chain.length} entries, ${RELAY_KILLS} kills with ${delivered.join("/")} in the file, ${released} leases released by recovery`,
    );
  }, 120_000);
});
