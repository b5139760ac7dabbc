// Faults between a daemon and PostgreSQL: daemon A runs in a network namespace and reaches PostgreSQL
// through a forwarder on a veth; daemon B runs beside PostgreSQL on the same schema. Delay and loss, a
// partition (A fails closed within its deadline, B keeps deciding), then heal (no double spend, every
// told verdict in the chain, the chain verifies). Linux and root only (CI runs as root); real processes.
// Here beside model-c.test.ts because it drives @leash/client, which the daemon package does not depend on.
// tc netem delays when the kernel has it; else the forwarder does (loss is iptables' in either case).
// Today's budgets are shared accounts (no per-daemon escrow yet): the shared agent account is checked.
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { generateKeyPair } from "@leash/chain";
import type { Reservation } from "@leash/core";
import {
  ensureBuilt,
  leashCli,
  openStore,
  PG_URL,
  type ServeProcess,
  STATE_DIR,
  serve,
  type TestStore,
  writeConfig,
} from "@leash/test-stores";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, createClient, type PreExecResult } from "../src/index.js";
import { createNetns, type Forwarder, type Netns, netnsUnavailable, startForwarder } from "./netns.js";

const BIN = fileURLToPath(new URL("../../../apps/cli/dist/bin.js", import.meta.url));
/**
 * Daemon A's deadline on the store, from its store URL: pg's query_timeout ends a query that has no
 * answer after this long (a partition resets nothing, so without it a query waits for TCP's own
 * timeout, minutes). PostgreSQL ends a session idle in a transaction after IDLE_TX_MS, so locks a cut-off
 * daemon held (the chain head, budget rows) are given back to the other daemon.
 */
const QUERY_TIMEOUT_MS = 2_000;
const IDLE_TX_MS = 2_000;
const CONNECT_TIMEOUT_S = 2;
/** The bound on A's fail-closed answer in a partition: see the partition case for how it is derived. */
const FAIL_CLOSED_BOUND_MS = CONNECT_TIMEOUT_S * 1000 + QUERY_TIMEOUT_MS + 2_000;
/** Clients wait longer than the daemon's deadline, so a fail-closed answer is the daemon's, not a client timeout. */
const CLIENT_TIMEOUT_MS = 20_000;
const TTL_S = 2;
// Large enough that the loads of (a) and (b) never exhaust it on a fast host (a DENY budget_exceeded
// in (c) would say nothing about healing); overspend is still checked against it at the end.
const SHARED_BUDGET = "1000";
const ESTIMATE = "0.01";
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const micro = (decimal: string) => Math.round(Number(decimal) * 1e6);

/** `leash serve` inside the namespace: `ip netns exec` execs node, so the child is the daemon itself. */
function serveIn(ns: Netns, args: readonly string[], env: Record<string, string>): Promise<ServeProcess> {
  return new Promise((resolve, reject) => {
    const child: ChildProcess = spawn(
      ns.exec[0]!,
      [...ns.exec.slice(1), process.execPath, BIN, "serve", ...args],
      {
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, LEASH_STATE_DIR: STATE_DIR, ...env },
      },
    );
    let out = "";
    let err = "";
    const exited = new Promise<void>((done) => child.once("exit", () => done()));
    const timer = setTimeout(() => reject(new Error(`serve in ${ns.name} did not start:\n${err}`)), 60_000);
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      out += chunk;
      const line = out.split("\n").find((l) => l.startsWith('{"listening"'));
      if (line === undefined) return;
      clearTimeout(timer);
      resolve({
        child,
        listening: JSON.parse(line),
        stderr: () => err,
        async stop() {
          if (child.exitCode !== null || child.signalCode !== null) return;
          child.kill("SIGTERM");
          const force = setTimeout(() => child.kill("SIGKILL"), 5_000);
          await exited;
          clearTimeout(force);
        },
      });
    });
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
      err += chunk;
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`serve in ${ns.name} exited with ${code} before listening:\n${err}`));
    });
  });
}

/** Every answer a client was told that is a verdict of the store (not a fail-closed one of its own). */
const told: PreExecResult[] = [];
const failedClosed: Array<{ daemon: string; reason: string; ms: number }> = [];

describe("network faults between a daemon and PostgreSQL", () => {
  const unavailable = netnsUnavailable();
  let store: TestStore<"postgres">;
  let ns: Netns | undefined;
  let forwarder: Forwarder | undefined;
  const daemons: ServeProcess[] = [];
  const clients: Client[] = [];
  let a: ServeProcess;
  let b: ServeProcess;
  let hmac: Buffer;
  let key: ReturnType<typeof generateKeyPair>;

  beforeAll(async () => {
    if (unavailable !== null) throw new Error(`this file needs ${unavailable}`);
    ensureBuilt();
    store = await openStore("postgres", { label: "netfault" });
    ns = createNetns();
    const pg = new URL(PG_URL);
    forwarder = await startForwarder(ns.hostIp, { host: pg.hostname, port: Number(pg.port || 5432) });
    hmac = randomBytes(32);
    key = generateKeyPair();
    const keyFile = join(store.dir, "daemon.key");
    writeFileSync(keyFile, key.privateKeyPem, { mode: 0o600 });
    const config = writeConfig(store.dir, "daemon.json", {
      reservation_ttl_s: TTL_S,
      organizations: {
        acme: {
          hmac_keys: { k1: { hex: hmac.toString("hex") } },
          default_guard: { budget_usd: 1000 },
          agents: { shared: { guard: { budget_usd: Number(SHARED_BUDGET), budget_scope: "agent" } } },
        },
      },
    });
    const viaForwarder = new URL(store.url);
    viaForwarder.hostname = ns.hostIp;
    viaForwarder.port = String(forwarder.port);
    viaForwarder.searchParams.set("query_timeout", String(QUERY_TIMEOUT_MS));
    viaForwarder.searchParams.set("connect_timeout", String(CONNECT_TIMEOUT_S));
    viaForwarder.searchParams.set("idle_in_transaction_session_timeout", String(IDLE_TX_MS));
    const args = (name: string) => [
      "--key-file",
      keyFile,
      "--config",
      config,
      "--socket",
      join(store.dir, `${name}.sock`),
    ];
    // The store URL through the environment, as an operator would (argv is visible to every user).
    a = await serveIn(ns, args("a"), { LEASH_STORE: viaForwarder.toString() });
    daemons.push(a);
    b = await serve(args("b"), { LEASH_STORE: store.url });
    daemons.push(b);
  }, 90_000);

  afterAll(async () => {
    if (process.env.NETFAULT_DEBUG) console.error(a?.stderr(), "\n---B---\n", b?.stderr(), failedClosed);
    for (const c of clients.splice(0)) c.close();
    ns?.heal();
    for (const d of daemons.splice(0)) await d.stop().catch(() => undefined);
    await forwarder?.close();
    ns?.destroy();
    await store?.close();
  }, 30_000);

  const connect = (daemon: ServeProcess, agentId: string) => {
    const c = createClient({
      socketPath: daemon.listening.listening,
      hmacKey: hmac,
      keyId: "k1",
      organizationId: "acme",
      agentId,
      daemonPublicKey: key.publicKeyHex,
      timeoutMs: CLIENT_TIMEOUT_MS,
      controlTimeoutMs: CLIENT_TIMEOUT_MS,
      heartbeatIntervalMs: 0,
    });
    clients.push(c);
    return c;
  };

  /** One call and its settlement; what the client was told is recorded, fail-closed answers apart. */
  const call = async (c: Client, daemon: string, session_id: string, n: number) => {
    const t0 = Date.now();
    const r = await c.preExec({
      session_id,
      tool_name: "search",
      params: { daemon, n },
      estimated_cost_usd: ESTIMATE,
    });
    const ms = Date.now() - t0;
    if (r.fail_closed) failedClosed.push({ daemon, reason: r.reason, ms });
    else told.push(r);
    if (!r.fail_closed && r.verdict === "ALLOW")
      await c
        .postExec({ session_id, call_number: r.call_number, actual_cost_usd: ESTIMATE })
        .catch(() => undefined);
    return { r, ms, t0 };
  };

  /** `clients` loops on `daemon`, each on a session of its own, until `until` resolves. */
  const load = (
    daemon: ServeProcess,
    name: string,
    agentId: string,
    count: number,
    until: Promise<unknown>,
  ) => {
    let stop = false;
    void until.then(() => {
      stop = true;
    });
    return Promise.all(
      Array.from({ length: count }, async (_, i) => {
        const c = connect(daemon, agentId);
        const { session_id } = await c.register();
        const results: Array<{ r: PreExecResult; ms: number; t0: number }> = [];
        for (let n = 0; !stop; n++) results.push(await call(c, `${name}${i}`, session_id, n));
        return results;
      }),
    ).then((per) => per.flat());
  };

  it("(a) 50 ms ± 20 ms delay and 5 % loss on A's link: every decision on both daemons is a verdict of the store", async () => {
    // netem when the kernel has it; else the forwarder holds each chunk as long (in order), and the loss
    // stays real packet loss (iptables statistic), so TCP retransmits as it would.
    const netem = ns!.netemDelay(25, 10); // each direction: 50 ms ± 20 ms round trip
    if (!netem) forwarder!.setDelay(25, 10);
    ns!.loss(0.05);
    const done = sleep(8_000);
    const [onA, onB] = await Promise.all([load(a, "a", "shared", 2, done), load(b, "b", "shared", 2, done)]);
    ns!.loss(0);
    ns!.clearDelay();
    forwarder!.setDelay(0, 0);
    expect(failedClosed).toEqual([]);
    // Slow on A (each transaction is several round trips, each lost packet a retransmission), not wrong.
    expect(onA.length).toBeGreaterThan(2);
    expect(onB.length).toBeGreaterThan(4);
    for (const { r } of [...onA, ...onB])
      expect([r.verdict, r.reason]).toEqual(["ALLOW", "within_thresholds"]);
  }, 40_000);

  it("(b) partition: A answers DENY fail_closed within its deadline; B keeps deciding for its own sessions", async () => {
    const c = connect(a, "shared");
    const { session_id } = await c.register();
    // A busy A, so the cut lands mid-transaction too (its backend then holds locks B needs).
    let endA = () => {};
    const busyA = load(a, "cutA", "shared", 2, new Promise<void>((r) => (endA = r)));
    const onB = load(b, "b", "shared", 2, sleep(9_000));
    await sleep(500);
    ns!.partition();
    const cut = Date.now();
    await sleep(1_000);
    endA();
    // Every call on A answered well after the cut is the daemon's own DENY fail_closed, never a verdict
    // (one answered just after it may carry a verdict PostgreSQL sent before it: (c) finds it in the chain).
    const fromA = await busyA;
    if (process.env.NETFAULT_DEBUG)
      console.error(fromA.map((x) => [x.t0 - cut, x.ms, x.r.verdict, x.r.reason]));
    // (How many there are depends on where the cut caught the loops: a settlement in flight holds one back.)
    const inCut = fromA.filter((x) => x.t0 + x.ms >= cut + 500);
    for (const x of inCut) expect([x.r.verdict, x.r.reason]).toEqual(["DENY", "fail_closed:daemon_error"]);
    // Alone on A (calls queue behind one another on a daemon, each batch waiting out its own deadline):
    // a call's checkout waits at most connect_timeout for a connection, its first query query_timeout;
    // the bound is the two plus two seconds for everything else on a loaded host.
    const { r, ms } = await call(c, "probeA", session_id, 0);
    expect([r.verdict, r.reason, r.fail_closed]).toEqual(["DENY", "fail_closed:daemon_error", true]);
    expect(ms).toBeLessThanOrEqual(FAIL_CLOSED_BOUND_MS);
    // B decided throughout: none of its answers failed closed, and it answered after the cut.
    const bResults = await onB;
    expect(bResults.filter((x) => x.r.fail_closed)).toEqual([]);
    expect(bResults.filter((x) => x.t0 > cut + 1_000).length).toBeGreaterThan(2);
    // B waits at most until PostgreSQL ends A's idle transaction (its locks given back), plus its own work.
    expect(Math.max(...bResults.map((x) => x.ms))).toBeLessThan(IDLE_TX_MS + 6_000);
  }, 40_000);

  it("(c) heal: A decides again; no double spend, no hold decided twice, every told verdict in the chain, leash verify OK", async () => {
    ns!.heal();
    const c = connect(a, "shared");
    let healed: PreExecResult | null = null;
    for (let i = 0; i < 40 && healed === null; i++) {
      const { session_id } = await c.register().catch(() => ({ session_id: "" }));
      if (session_id !== "") {
        const { r } = await call(c, "healA", session_id, i);
        if (!r.fail_closed) healed = r;
      }
      if (healed === null) await sleep(500);
    }
    expect([healed?.verdict, healed?.reason]).toEqual(["ALLOW", "within_thresholds"]);
    // Holds whose answer was lost in the cut expire after the TTL and are charged (never given back).
    const read = () =>
      store.substrate.transaction(async (tx) => ({
        account: await tx.budgets.getAccount("agent:acme/shared"),
        holds: await tx.budgets.listReservations({}),
        entries: await tx.chain.range(0, 10_000_000),
      }));
    let state = await read();
    for (let waited = 0; state.holds.some((h) => h.status === "PENDING") && waited < 15_000; waited += 250) {
      await sleep(250);
      state = await read();
    }
    const { account, holds, entries } = state;
    if (process.env.NETFAULT_DEBUG) {
      const by = (xs: readonly string[]) => {
        const m: Record<string, number> = {};
        for (const x of xs) m[x] = (m[x] ?? 0) + 1;
        return m;
      };
      console.error({
        holds: by(holds.map((h) => h.status)),
        entries: by(entries.map((e) => e.kind)),
        told: told.length,
        failedClosed: failedClosed.length,
      });
    }
    expect(account, "the shared agent account").not.toBeNull();
    const mine = holds.filter((h: Reservation) => h.account_ids.includes(account!.account_id));
    expect(mine.filter((h) => h.status === "PENDING")).toEqual([]);
    // No double spend: spent is exactly the settled and charged holds, nothing else.
    const charged = mine
      .filter((h) => h.status === "SETTLED" || h.status === "EXPIRED")
      .reduce((sum, h) => sum + micro(h.actual_usd ?? "0"), 0);
    expect(micro(account!.spent_usd)).toBe(charged);
    expect(micro(account!.reserved_usd)).toBe(0);
    expect(micro(account!.spent_usd)).toBeLessThanOrEqual(micro(SHARED_BUDGET));
    // No hold decided twice: one decision per (session, call), one hold per call, one settlement entry per hold.
    const decisions = entries.filter((e) => e.kind === "decision");
    const pair = (s: string | null, n: unknown) => `${s}#${n}`;
    const data = (body: string) => (JSON.parse(body) as { data: Record<string, unknown> }).data;
    const decided = decisions.map((e) => pair(e.session_id, data(e.body).call_number));
    expect(new Set(decided).size).toBe(decided.length);
    const holdKeys = holds.map((h) => pair(h.session_id, h.call_number));
    expect(new Set(holdKeys).size).toBe(holdKeys.length);
    // A hold is resolved once of each kind: a settlement entry, an expiry entry. Both for one hold is by
    // design (an expired hold is charged at its estimate; a late settle corrects that charge to the actual,
    // which the spent check above would catch if it added on top).
    const resolvedBy = new Map<string, number>();
    for (const e of entries) {
      const d = data(e.body);
      if (typeof d.reservation_id === "string" && e.kind !== "decision") {
        const k = `${d.reservation_id} ${e.kind}`;
        resolvedBy.set(k, (resolvedBy.get(k) ?? 0) + 1);
      }
    }
    expect([...resolvedBy].filter(([, n]) => n > 1)).toEqual([]);
    // Every verdict a client was told is its session's decision entry, as told.
    const byHash = new Map(entries.map((e) => [e.entry_hash, e]));
    expect(told.length).toBeGreaterThan(10);
    for (const r of told) {
      const entry = byHash.get(r.entry_hash as string);
      expect(entry?.kind, `${r.session_id} #${r.call_number}`).toBe("decision");
      expect(entry?.session_id).toBe(r.session_id);
      expect(data(entry!.body)).toMatchObject({ call_number: r.call_number, verdict: r.verdict });
    }
    const verify = await leashCli(["verify", "--store", store.url, "--pubkey", key.publicKeyHex]);
    expect(verify.code, verify.stderr).toBe(0);
  }, 60_000);
});
