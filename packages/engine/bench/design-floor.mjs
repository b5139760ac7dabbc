// The floor under the chain-is-the-database design of #20 on SQLite (not a test, not the engine): what a
// durable, signed decision costs when the entry is the only row a decision writes and state is a projection.
//
// Per decision: a synchronous step on an in-memory projection (counter, nonce set, exact integer budget),
// one signed chain entry (the real @leash/chain buildEntry and compact JWS), one INSERT of it. Per batch
// (group commit): BEGIN IMMEDIATE, the entries, ONE snapshot row per touched session and per touched
// budget account (coalesced, stamped with the chain position), COMMIT with fsync (synchronous=FULL, WAL).
// It holds no Leash rule beyond those few lines: it measures the least the design can cost on this
// machine, to compare with `bench engine` and packages/engine/bench/floor.mjs (today's six rows) in the
// same minutes.
//
// Run after `tsc --build`:  node packages/engine/bench/design-floor.mjs
// Environment: DURATION (seconds, default 10), CONCURRENCY (callers, default 16), BODY=full|compact
// (the decision entry's data: today's fields with the state copy, or inputs and outcome only; default
// compact), SIGN=0 (a fixed signature: the signature's share), SIGN=worker (the entries are built and
// hash-linked on the main thread, and signed by a worker thread while the main thread goes on: the
// entry hash covers the body, not the signature, so the chain does not wait for it), SIGN=shared (the
// same, fed through shared memory instead of a message per entry).

import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { buildEntry, chainIdOf, compactJws, generateKeyPair } from "@leash/chain";

const require = createRequire(new URL("../../substrate-sqlite/package.json", import.meta.url));
const Database = require("better-sqlite3");

const SECONDS = Number(process.env.DURATION ?? 10);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 16);
const BODY = process.env.BODY ?? "compact";
const SIGN = process.env.SIGN ?? "1";
const WARMUP_SECONDS = 1;
/** Budget in integer micro-units (10^-18 dollars would need bigint; micro-dollars fit a double exactly). */
const LIMIT = 1_000_000_000 * 1e6;
const COST = 1_000; // $0.001

const dir = mkdtempSync(join(tmpdir(), "leash-design-floor-"));
const db = new Database(join(dir, "floor.db"));
db.pragma("journal_mode = WAL");
db.pragma("synchronous = FULL");
db.exec(`
  CREATE TABLE chain (seq INTEGER PRIMARY KEY, entry_id TEXT NOT NULL, kind TEXT NOT NULL,
    session_id TEXT, nonce TEXT, created_ns INTEGER NOT NULL, prev_hash TEXT NOT NULL,
    entry_hash TEXT NOT NULL, key_id TEXT NOT NULL, signature TEXT NOT NULL, body TEXT NOT NULL);
  CREATE UNIQUE INDEX chain_session_nonce ON chain (session_id, nonce) WHERE nonce IS NOT NULL;
  CREATE TABLE session_snapshot (session_id TEXT PRIMARY KEY, at_seq INTEGER NOT NULL, state TEXT NOT NULL);
  CREATE TABLE account_snapshot (account_id TEXT PRIMARY KEY, at_seq INTEGER NOT NULL,
    spent_units INTEGER NOT NULL, reserved_units INTEGER NOT NULL);
`);
const insertEntry = db.prepare(
  "INSERT INTO chain (seq, entry_id, kind, session_id, nonce, created_ns, prev_hash, entry_hash, key_id, signature, body) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
);
const upsertSession = db.prepare(
  "INSERT INTO session_snapshot (session_id, at_seq, state) VALUES (?,?,?) ON CONFLICT(session_id) DO UPDATE SET at_seq = excluded.at_seq, state = excluded.state",
);
const upsertAccount = db.prepare(
  "INSERT INTO account_snapshot (account_id, at_seq, spent_units, reserved_units) VALUES (?,?,?,?) ON CONFLICT(account_id) DO UPDATE SET at_seq = excluded.at_seq, spent_units = excluded.spent_units, reserved_units = excluded.reserved_units",
);
const begin = db.prepare("BEGIN IMMEDIATE");
const commit = db.prepare("COMMIT");

const { signer: realSigner, privateKeyPem } = generateKeyPair();
const fixed = realSigner.sign(new Uint8Array(1));
const signer = SIGN === "1" ? realSigner : { ...realSigner, sign: () => fixed, implementation: "none" };

/** SIGN=worker: one thread that signs each entry's JWS signing input as it arrives, in order. */
const signing =
  SIGN === "worker"
    ? (() => {
        // The worker loads the same @leash/chain signer (libsodium where it loads) from the same key.
        const worker = new Worker(
          `const { parentPort, workerData } = require("node:worker_threads");
           const pending = [];
           let signer = null;
           let out = [];
           const handle = (m) => {
             if (m === null) { parentPort.postMessage(out); out = []; return; }
             out.push(Buffer.from(signer.sign(m)).toString("base64url"));
           };
           parentPort.on("message", (m) => (signer === null ? pending.push(m) : handle(m)));
           import(workerData.chain).then(({ createSigner }) => {
             signer = createSigner(workerData.pem);
             for (const m of pending.splice(0)) handle(m);
           });`,
          { eval: true, workerData: { pem: privateKeyPem, chain: import.meta.resolve("@leash/chain") } },
        );
        worker.unref();
        let waiting = null;
        worker.on("message", (signatures) => waiting(signatures));
        return {
          sign: (entry) => {
            const jws = compactJws(entry);
            worker.postMessage(Buffer.from(jws.slice(0, jws.lastIndexOf(".")), "latin1"));
          },
          /** The signatures of every entry posted since the last collect, in order. */
          collect: () =>
            new Promise((resolve) => {
              waiting = resolve;
              worker.postMessage(null);
            }),
        };
      })()
    : SIGN === "shared"
      ? sharedMemorySigning()
      : null;

/**
 * SIGN=shared: the same worker, fed through a ring of slots in shared memory (Atomics, no message
 * per entry): the main thread copies a signing input into a slot and bumps a counter; the worker
 * signs slots as they fill and bumps another; the batch waits (Atomics.waitAsync) for the last one.
 */
function sharedMemorySigning() {
  const SLOTS = 64;
  const INPUT = 8192;
  const SIG = 86; // base64url of 64 bytes
  const control = new Int32Array(new SharedArrayBuffer(8 + 4 * SLOTS)); // [posted, signed, lengths…]
  const inputs = new Uint8Array(new SharedArrayBuffer(SLOTS * INPUT));
  const signatures = new Uint8Array(new SharedArrayBuffer(SLOTS * SIG));
  const worker = new Worker(
    `const { workerData } = require("node:worker_threads");
     const { control, inputs, signatures, SLOTS, INPUT, SIG } = workerData;
     import(workerData.chain).then(({ createSigner }) => {
       const signer = createSigner(workerData.pem);
       let signed = 0;
       for (;;) {
         const posted = Atomics.load(control, 0);
         if (signed === posted) { Atomics.wait(control, 0, posted); continue; }
         const slot = signed % SLOTS;
         const input = inputs.subarray(slot * INPUT, slot * INPUT + control[2 + slot]);
         const sig = Buffer.from(signer.sign(input)).toString("base64url");
         signatures.set(Buffer.from(sig, "latin1"), slot * SIG);
         Atomics.store(control, 1, ++signed);
         Atomics.notify(control, 1);
       }
     });`,
    {
      eval: true,
      workerData: {
        pem: privateKeyPem,
        chain: import.meta.resolve("@leash/chain"),
        control,
        inputs,
        signatures,
        SLOTS,
        INPUT,
        SIG,
      },
    },
  );
  // Kept referenced: a pending Atomics.waitAsync does not keep the process alive by itself.
  let posted = 0;
  let collected = 0;
  const decoder = new TextDecoder();
  return {
    sign: (entry) => {
      const jws = compactJws(entry);
      const text = jws.slice(0, jws.lastIndexOf("."));
      if (text.length > INPUT || posted - collected >= SLOTS) throw new Error("signing ring overflow");
      const slot = posted % SLOTS;
      inputs.set(Buffer.from(text, "latin1"), slot * INPUT);
      control[2 + slot] = text.length;
      Atomics.store(control, 0, ++posted);
      Atomics.notify(control, 0);
    },
    close: () => worker.terminate(),
    collect: async () => {
      for (;;) {
        const signed = Atomics.load(control, 1);
        if (signed === posted) break;
        const { async, value } = Atomics.waitAsync(control, 1, signed);
        if (async) await value;
      }
      const out = [];
      for (; collected < posted; collected++) {
        const slot = collected % SLOTS;
        out.push(decoder.decode(signatures.slice(slot * SIG, slot * SIG + SIG)));
      }
      return out;
    },
  };
}

let nowNs = Date.now() * 1e6;
const tick = () => (nowNs += 1000);
const genesis = buildEntry({ head: null, kind: "floor_start", data: {}, signer, nowNs: tick() });
const chainId = chainIdOf(genesis);
let head = { seq: genesis.seq, entry_hash: genesis.entry_hash };

/** The projection: what the chain implies, held by the one writer. */
const account = { id: "agent:floor", spent: 0, reserved: 0 };
const sessions = Array.from({ length: CONCURRENCY }, (_, i) => ({
  id: `floor-s${i}`,
  calls: 0,
  nonces: new Set(),
  repeat: 0,
  lastTool: "",
}));

function dataOf(session, nonce, callNumber, before, after, at) {
  const common = {
    session_id: session.id,
    call_number: callNumber,
    tool_name: "search",
    params_hash: "9f2c1e4b7a0d3c6e9f2c1e4b7a0d3c6e9f2c1e4b7a0d3c6e9f2c1e4b7a0d3c6e",
    params_json: '{"q":"pricing"}',
    nonce,
    estimate_usd: "0.001",
    verdict: "ALLOW",
    reason: "within_thresholds",
    budget_after_usd: after,
  };
  if (BODY === "compact") return common;
  return {
    ...common,
    agent_id: "floor",
    organization_id: "default",
    estimated_cost_usd: "0.001",
    expected_params_hash: null,
    hitl_request_id: null,
    hold_ttl_ns: 300000000000,
    budget_before_usd: before,
    reservation_id: `${session.id}#${callNumber}`,
    rng: null,
    operator_id: null,
    replay_inputs: 1,
    state: {
      circuit_tripped: false,
      total_calls: session.calls,
      session_started_ns: "1796177358208751104",
      seen_nonces: [],
      budget_initial_usd: 1000000000,
      budget_remaining_usd: 999998765.432,
    },
    now_ns: String(at),
  };
}

const money = (units) => (units / 1e6).toFixed(6).replace(/\.?0+$/, "");

let queue = [];
let scheduled = false;
/** A batch is between BEGIN and COMMIT (with SIGN=worker it waits for its signatures there). */
let inFlight = false;
let seq = 0;

/** One decision: the synchronous step on the projection, then wait for its batch to be durable. */
function evaluate(session) {
  return new Promise((resolve, reject) => {
    queue.push({ session, resolve, reject });
    if (!scheduled && !inFlight) {
      scheduled = true;
      setImmediate(flush);
    }
  });
}

function flush() {
  scheduled = false;
  const batch = queue;
  queue = [];
  const touched = new Set();
  const written = [];
  inFlight = true;
  begin.run();
  try {
    for (const item of batch) {
      const { session } = item;
      const nonce = `0.${seq++}`;
      if (session.nonces.has(nonce)) throw new Error("duplicate nonce");
      const before = LIMIT - account.spent - account.reserved;
      if (before < COST) throw new Error("budget");
      const at = tick();
      const callNumber = session.calls + 1;
      const entry = buildEntry({
        head,
        chainId,
        kind: "decision",
        signer,
        nowNs: at,
        data: dataOf(session, nonce, callNumber, money(before), money(before - COST), at),
      });
      // The step's state changes (ALLOW: counter, nonce, repeat, hold), applied once the entry exists.
      session.calls = callNumber;
      session.nonces.add(nonce);
      session.repeat = session.lastTool === "search" ? session.repeat + 1 : 1;
      session.lastTool = "search";
      account.reserved += COST;
      head = { seq: entry.seq, entry_hash: entry.entry_hash };
      touched.add(session);
      written.push({ item, entry, session, nonce, at });
      if (signing === null) insertRow(written[written.length - 1]);
      else signing.sign(entry);
    }
  } catch (error) {
    fail(batch, error);
    return;
  }
  if (signing === null) finish(touched, written);
  else
    signing.collect().then((signatures) => {
      for (let i = 0; i < written.length; i++) written[i].entry.signature = signatures[i];
      try {
        for (const row of written) insertRow(row);
      } catch (error) {
        fail(batch, error);
        return;
      }
      finish(touched, written);
    });
}

function fail(batch, error) {
  db.exec("ROLLBACK");
  for (const item of batch) item.reject(error);
  next();
}

/** The next batch starts when this one is committed or rolled back. */
function next() {
  inFlight = false;
  if (queue.length > 0 && !scheduled) {
    scheduled = true;
    setImmediate(flush);
  }
}

function insertRow({ entry, session, nonce, at }) {
  insertEntry.run(
    entry.seq,
    entry.entry_id,
    entry.kind,
    session.id,
    nonce,
    BigInt(at),
    entry.prev_hash,
    entry.entry_hash,
    entry.key_id,
    entry.signature,
    entry.body,
  );
}

/** One snapshot row per touched session and account, stamped with the head; COMMIT; then tell. */
function finish(touched, written) {
  try {
    for (const session of touched) {
      upsertSession.run(
        session.id,
        head.seq,
        JSON.stringify({ calls: session.calls, repeat: session.repeat, last_tool: session.lastTool }),
      );
    }
    upsertAccount.run(account.id, head.seq, account.spent, account.reserved);
    commit.run();
  } catch (error) {
    fail(
      written.map((w) => w.item),
      error,
    );
    return;
  }
  // Told only after COMMIT (fsync): no verdict without its record. The receipt is the entry as a JWS.
  for (const { item, entry } of written) item.resolve(compactJws(entry));
  next();
}

async function run(seconds) {
  const deadline = performance.now() + seconds * 1000;
  let done = 0;
  const latencies = [];
  await Promise.all(
    sessions.map(async (session) => {
      while (performance.now() < deadline) {
        const t0 = performance.now();
        await evaluate(session);
        latencies.push(performance.now() - t0);
        done++;
      }
    }),
  );
  return { done, latencies };
}

try {
  await run(WARMUP_SECONDS);
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  const { done, latencies } = await run(SECONDS);
  const seconds = (performance.now() - t0) / 1000;
  const { user, system } = process.cpuUsage(cpu);
  latencies.sort((a, b) => a - b);
  const at = (q) =>
    Number(latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))].toFixed(3));
  console.log(
    JSON.stringify({
      bench: "design-floor",
      store: "sqlite",
      body: BODY,
      signed: SIGN,
      concurrency: CONCURRENCY,
      seconds: Number(seconds.toFixed(3)),
      decisions: done,
      decisions_per_sec: Math.round(done / seconds),
      p50_ms: at(0.5),
      p99_ms: at(0.99),
      cpu_us_per_decision: Math.round((user + system) / done),
      entry_bytes: JSON.stringify(
        buildEntry({
          head,
          chainId,
          kind: "decision",
          signer,
          nowNs: tick(),
          data: dataOf(sessions[0], "0.x", 1, "1", "1", 1),
        }).body,
      ).length,
      node: process.version,
    }),
  );
} finally {
  await signing?.close?.();
  db.close();
  rmSync(dir, { recursive: true, force: true });
}
