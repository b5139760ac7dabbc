// `leash bench daemon`: the daemon's decisions/s and round trip through @leash/client, beside the library
// engine's own figure on the same store kind, in alternating slices of one run; one JSON line. Daemons are child processes.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { generateKeyPair, type Signer } from "@leash/chain";
import {
  CliError,
  dropPostgresSchema,
  EXIT_BAD_INPUT,
  firstLine,
  type Io,
  nonNegativeNumber,
  parseStoreUrl,
  positiveInteger,
  positiveNumber,
  resolveStoreUrl,
  type StoreTarget,
} from "@leash/cli/internal";
import { type Client, type ClientOptions, createClient } from "@leash/client";
import type { Substrate } from "@leash/core";
import { createEngine, type Engine, openStore } from "@leash/engine";
import type { Command } from "commander";
import { type Call, Meter, type RunningDaemon, startDaemon, stopDaemon } from "./daemon-meter.js";
import { daemonReport, type OverspendFigures, type RunFigures } from "./daemon-report.js";
import { type EndChecks, endChecks, ToldLog } from "./end-checks.js";
import { PgProbe } from "./pg-probe.js";
import { parseDaemonCounts, sweepTable } from "./scale-report.js";

export interface BenchDaemonOptions {
  readonly transport: string;
  readonly clients: number;
  readonly seconds: number;
  readonly warmup: number;
  /** Daemons sharing the store; several (a sweep) run one after another, each on fresh schemas. */
  readonly daemons: number | readonly number[];
  /** Seconds of each one-client phase (transport overhead); default min(seconds, 5). */
  readonly singleSeconds?: number;
  readonly store?: string;
}

/** Large enough that no run comes near it, so every call takes the ALLOW path with a real hold. */
const BENCH_BUDGET_USD = 1_000_000_000;
const ESTIMATE_USD = "0.001";
/** The overspend check's budget and per-call estimate (settled at the estimate). */
const CHECK_BUDGET_USD = "1";
const CHECK_ESTIMATE_USD = "0.01";
const CHECK_MAX_ALLOWS = 100;
const TOOLS = ["search", "fetch", "read_file", "list_dir", "summarize", "translate", "lookup", "write_note"];
/** A bench client waits this long rather than fail closed: the bench measures latency, it does not cap it. */
const CLIENT_TIMEOUT_MS = 30_000;
const ORG = "bench";

/** The library engine in this process (Model A), on its own fresh store: `callers` sessions on one agent budget. */
async function engineParty(
  url: string,
  signer: Signer,
  callers: number,
  tag: string,
): Promise<{ call: Call; close(): Promise<void> }> {
  const substrate: Substrate = await openStore(url);
  const engine: Engine = createEngine({ substrate, signer });
  const sessions: string[] = [];
  for (let i = 0; i < callers; i++) {
    const { session_id } = await engine.register({
      session_id: `bench-${tag}-${i}`,
      agent_id: `bench-${tag}`,
      config: { budget_usd: BENCH_BUDGET_USD, budget_scope: "agent" },
    });
    sessions.push(session_id);
  }
  return {
    call: async (caller, n) =>
      (
        await engine.evaluate({
          session_id: sessions[caller]!,
          tool_name: TOOLS[n % TOOLS.length]!,
          params: { q: `query ${n}`, page: n % 7, caller },
          nonce: `${tag}.${n}`,
          estimated_cost_usd: ESTIMATE_USD,
        })
      ).verdict === "ALLOW",
    close: () => substrate.close(),
  };
}

/** `clients` @leash/client clients spread over `daemons` in turn, one session each. */
async function daemonParty(
  daemons: readonly RunningDaemon[],
  options: (d: RunningDaemon) => ClientOptions,
  clients: number,
  tag: string,
  told: ToldLog,
): Promise<{ call: Call; close(): void }> {
  const opened: Client[] = Array.from({ length: clients }, (_, i) =>
    createClient(options(daemons[i % daemons.length]!)),
  );
  const sessions = await Promise.all(opened.map((c) => c.register().then((r) => r.session_id)));
  return {
    call: async (caller, n) => {
      const r = await opened[caller]!.preExec({
        session_id: sessions[caller]!,
        tool_name: TOOLS[n % TOOLS.length]!,
        params: { q: `query ${n}`, page: n % 7, caller },
        nonce: `${tag}.${n}`,
        estimated_cost_usd: ESTIMATE_USD,
      });
      if (!r.fail_closed) told.add(sessions[caller]!, r.call_number, r.verdict);
      return !r.fail_closed && r.verdict === "ALLOW";
    },
    close: () => {
      for (const c of opened) c.close();
    },
  };
}

/** Runs the meters' slices in turn, `rounds` times, after one warm-up slice each. */
async function alternate(meters: readonly Meter[], seconds: number, warmup: number): Promise<void> {
  if (warmup > 0) for (const m of meters) await m.slice(warmup, false);
  const rounds = Math.max(1, Math.round(seconds));
  for (let r = 0; r < rounds; r++) for (const m of meters) await m.slice(seconds / rounds, true);
}

/**
 * Model C's promise under load: `clients` clients spread over the daemons race for one agent budget of
 * $1 in $0.01 holds, each settled at its estimate; the ALLOWs must not exceed the budget.
 */
async function overspendCheck(
  daemons: readonly RunningDaemon[],
  base: (d: RunningDaemon) => ClientOptions,
  clients: number,
  told: ToldLog,
): Promise<OverspendFigures> {
  const opened = Array.from({ length: clients }, (_, i) =>
    createClient({ ...base(daemons[i % daemons.length]!), agentId: "budget-check" }),
  );
  let allowed = 0;
  let seq = 0;
  try {
    await Promise.all(
      opened.map(async (c) => {
        for (let s = 0; s < 1000; s++) {
          const { session_id } = await c.register();
          for (;;) {
            const r = await c.preExec({
              session_id,
              tool_name: "search",
              params: { n: seq++ },
              estimated_cost_usd: CHECK_ESTIMATE_USD,
            });
            if (r.fail_closed)
              throw new CliError(`bench daemon: the overspend check failed closed: ${r.detail}`, 1);
            told.add(session_id, r.call_number, r.verdict);
            if (r.verdict !== "ALLOW") {
              if (r.reason === "budget_exhausted" || r.reason === "budget_overrun") return;
              break; // a tripped circuit: a new session
            }
            allowed++;
            await c.postExec({ session_id, call_number: r.call_number, actual_cost_usd: CHECK_ESTIMATE_USD });
          }
        }
      }),
    );
  } finally {
    for (const c of opened) c.close();
  }
  return {
    budget_usd: CHECK_BUDGET_USD,
    estimate_usd: CHECK_ESTIMATE_USD,
    allowed,
    max_allowed: CHECK_MAX_ALLOWS,
    zero_overspend: allowed <= CHECK_MAX_ALLOWS,
  };
}

/** A fresh place of the same kind for each party: a temp directory beside the SQLite file, or new schemas. */
function freshUrls(
  target: StoreTarget,
  scratch: string,
): { daemon: string; engine: string; schemas: string[]; app: string | null } {
  if (target.kind === "sqlite") {
    // The given URL's parameters (synchronous=NORMAL, group_commit=off, …) apply to both stores.
    const query = target.url.includes("?") ? target.url.slice(target.url.indexOf("?")) : "";
    return {
      daemon: `sqlite:${join(scratch, "daemon.db")}${query}`,
      engine: `sqlite:${join(scratch, "engine.db")}${query}`,
      schemas: [],
      app: null,
    };
  }
  if (target.kind === "postgres") {
    const id = randomBytes(6).toString("hex");
    const [daemon, engine] = [`leash_bench_daemon_${id}`, `leash_bench_engine_${id}`];
    const sep = target.connection.includes("?") ? "&" : "?";
    const groupCommit = target.groupCommit ? "" : "&group_commit=off";
    // The daemons' own application_name: how the probe tells their backends from every other one.
    const app = `leash_bench_${id}`;
    return {
      daemon: `${target.connection}${sep}schema=${daemon}${groupCommit}&application_name=${app}`,
      engine: `${target.connection}${sep}schema=${engine}${groupCommit}`,
      schemas: [daemon, engine],
      app,
    };
  }
  throw new CliError(
    "bench daemon: a memory: store lives in one process; give sqlite: or postgres://",
    EXIT_BAD_INPUT,
  );
}

export async function runBenchDaemon(options: BenchDaemonOptions, io: Io): Promise<number> {
  if (options.transport !== "unix" && options.transport !== "grpc")
    throw new CliError(
      `bench daemon: --transport is unix or grpc, not ${JSON.stringify(options.transport)}`,
      EXIT_BAD_INPUT,
    );
  const counts = typeof options.daemons === "number" ? [options.daemons] : options.daemons;
  if (counts.length === 0 || counts.some((n) => n !== 1 && n !== 2 && n !== 4))
    throw new CliError("bench daemon: --daemons is 1, 2 or 4, or a list of them (1,2,4)", EXIT_BAD_INPUT);
  const target = parseStoreUrl(resolveStoreUrl(options.store, io.env, undefined));
  if (counts.some((n) => n > 1) && target.kind !== "postgres")
    throw new CliError(
      "bench daemon: --daemons 2 or 4 needs a postgres:// store (daemons share it)",
      EXIT_BAD_INPUT,
    );
  const reports: Record<string, unknown>[] = [];
  let code = 0;
  for (const n of counts) {
    const run = await runOnce(options, n, target, io);
    io.stdout(`${JSON.stringify(run.report)}\n`);
    reports.push(run.report);
    if (run.code !== 0) code = run.code;
  }
  if (counts.length > 1) io.stdout(sweepTable(reports));
  return code;
}

/** The daemons' key file and config in `scratch`: one organization, the bench budget, the check agent. */
function writeDaemonFiles(scratch: string) {
  const hmac = randomBytes(32).toString("hex");
  const key = generateKeyPair();
  const keyFile = join(scratch, "daemon.key");
  writeFileSync(keyFile, key.privateKeyPem, { mode: 0o600 });
  const config = join(scratch, "daemon.json");
  writeFileSync(
    config,
    JSON.stringify({
      organizations: {
        [ORG]: {
          hmac_keys: { k1: { hex: hmac } },
          default_guard: { budget_usd: BENCH_BUDGET_USD, budget_scope: "agent" },
          agents: {
            "budget-check": { guard: { budget_usd: Number(CHECK_BUDGET_USD), budget_scope: "agent" } },
          },
        },
      },
    }),
    { mode: 0o600 },
  );
  return { hmac, key, keyFile, config };
}

/**
 * Measures every party: the engine, the daemons (receipts unchecked and checked, and one daemon alone
 * when there are several) in alternating slices, then the one-caller engine and one-client daemon.
 */
async function measureParties(
  options: BenchDaemonOptions,
  daemons: readonly RunningDaemon[],
  base: (checked: boolean) => (d: RunningDaemon) => ClientOptions,
  parts: { engineUrl: string; told: ToldLog; probe: PgProbe | null; closers: Array<() => unknown> },
): Promise<RunFigures> {
  const { told, probe, closers } = parts;
  const single = options.singleSeconds ?? Math.min(options.seconds, 5);
  const party = async <P extends { call: Call; close(): unknown }>(made: Promise<P>) => {
    const p = await made;
    closers.push(() => p.close());
    return p;
  };
  const meter = async <P extends { call: Call; close(): unknown }>(
    made: Promise<P>,
    callers: number,
    on: readonly RunningDaemon[],
  ) => new Meter((await party(made)).call, callers, on);
  // The library engine runs in this process (Model A: that is what it is); the daemons do not.
  const n = options.clients;
  const engineKey = generateKeyPair().signer;
  const engineMeter = await meter(engineParty(parts.engineUrl, engineKey, n, "engine"), n, []);
  const mainMeter = new Meter(
    (await party(daemonParty(daemons, base(false), n, "main", told))).call,
    n,
    daemons,
    probe ?? undefined,
  );
  const checkedMeter = await meter(daemonParty(daemons, base(true), n, "checked", told), n, daemons);
  const oneDaemonMeter =
    daemons.length > 1
      ? await meter(daemonParty(daemons.slice(0, 1), base(false), n, "single", told), n, daemons)
      : null;
  await alternate(
    [engineMeter, mainMeter, checkedMeter, ...(oneDaemonMeter === null ? [] : [oneDaemonMeter])],
    options.seconds,
    options.warmup,
  );
  const engineOneMeter = await meter(engineParty(parts.engineUrl, engineKey, 1, "engine1"), 1, []);
  const oneMeter = await meter(daemonParty(daemons.slice(0, 1), base(false), 1, "one", told), 1, daemons);
  await alternate([engineOneMeter, oneMeter], single, options.warmup);
  return {
    mainMeter,
    checkedMeter,
    main: mainMeter.figure("daemon"),
    checked: checkedMeter.figure("daemon (receipts checked)"),
    engine: engineMeter.figure("engine"),
    one: oneMeter.figure("one-client daemon"),
    engineOne: engineOneMeter.figure("one-caller engine"),
    oneDaemon: oneDaemonMeter?.figure("one-daemon") ?? null,
  };
}

async function runOnce(
  options: BenchDaemonOptions,
  daemonCount: number,
  target: StoreTarget,
  io: Io,
): Promise<{ code: number; report: Record<string, unknown> }> {
  const scratch = mkdtempSync(
    target.kind === "sqlite"
      ? join(dirname(resolve(target.options.path)), "leash-bench-daemon-")
      : join(tmpdir(), "leash-bench-daemon-"),
  );
  const urls = freshUrls(target, scratch);
  const daemons: RunningDaemon[] = [];
  const closers: Array<() => unknown> = [];
  try {
    const { hmac, key, keyFile, config } = writeDaemonFiles(scratch);
    const grpc = options.transport === "grpc";
    for (let i = 0; i < daemonCount; i++)
      daemons.push(await startDaemon(urls.daemon, scratch, `d${i}`, keyFile, config, grpc));
    const base =
      (checked: boolean) =>
      (d: RunningDaemon): ClientOptions => ({
        ...(grpc
          ? { grpc: { address: d.grpc as string, tls: false as const } }
          : { socketPath: d.socket, hmacKey: hmac, keyId: "k1" }),
        organizationId: ORG,
        agentId: "bench",
        timeoutMs: CLIENT_TIMEOUT_MS,
        controlTimeoutMs: CLIENT_TIMEOUT_MS,
        heartbeatIntervalMs: 0,
        ...(checked ? { daemonPublicKey: key.publicKeyHex } : {}),
      });
    const told = new ToldLog();
    const probe =
      target.kind === "postgres" && urls.app !== null
        ? await PgProbe.open(target.connection, urls.app)
        : null;
    if (probe !== null) closers.push(() => probe.close());
    const figures = await measureParties(options, daemons, base, {
      engineUrl: urls.engine,
      told,
      probe,
      closers,
    });
    const overspend =
      daemons.length > 1 ? await overspendCheck(daemons, base(false), options.clients, told) : null;
    // After every party ran, so the told verdicts of all of them are looked for.
    const checks: EndChecks | null =
      target.kind === "postgres" ? await endChecks(target.connection, urls.schemas[0]!, told) : null;
    const report = daemonReport(
      {
        transport: options.transport,
        store: target.kind,
        daemons: daemonCount,
        clients: options.clients,
        seconds: options.seconds,
      },
      figures,
      { overspend, checks, probe },
    );
    const bad =
      (overspend !== null && !overspend.zero_overspend) ||
      (checks !== null &&
        (!checks.zero_overspend || !checks.every_told_verdict_in_chain || checks.decided_twice > 0));
    return { code: bad ? 1 : 0, report };
  } finally {
    for (const close of closers.reverse()) await Promise.resolve(close()).catch(() => undefined);
    await Promise.all(daemons.map(stopDaemon));
    for (const schema of urls.schemas) {
      if (target.kind !== "postgres") break;
      await dropPostgresSchema(target.connection, schema).catch((err: unknown) => {
        io.stderr(`leash: warning: could not drop the benchmark schema: ${firstLine(err)}\n`);
      });
    }
    rmSync(scratch, { recursive: true, force: true });
  }
}

export function registerBenchDaemon(bench: Command, io: Io, setExit: (code: number) => void): void {
  bench
    .command("daemon")
    .description(
      "measure the sidecar daemon through @leash/client beside the library engine, same store kind",
    )
    .option("--transport <unix|grpc>", "how the clients reach the daemon", "unix")
    .option("--clients <n>", "concurrent clients, each one session awaiting each call", positiveInteger, 16)
    .option("--seconds <n>", "how long to measure each figure", positiveNumber, 10)
    .option("--warmup <n>", "how long to run each figure first without measuring", nonNegativeNumber, 1)
    .option(
      "--daemons <n>",
      "daemon processes sharing the store: 1, 2 or 4 (2 and 4: postgres only), or a sweep such as 1,2,4",
      parseDaemonCounts,
      1,
    )
    .option(
      "--single-seconds <n>",
      "how long the one-client figures measure (default: min(seconds, 5))",
      positiveNumber,
    )
    .option(
      "--store <url>",
      "the store kind and place: sqlite:PATH (fresh files in a temp directory beside PATH) or postgres://… (fresh schemas, dropped after); default $LEASH_STORE",
    )
    .addHelpText(
      "after",
      `
The daemons are \`leash serve\` child processes (an ephemeral key, a fresh store); the load generator
and the library engine (Model A, on its own fresh store of the same kind) run in this process. Four
parties take turns in one-second slices for --seconds each, after a --warmup slice each: the engine
with --clients callers, --clients @leash/client clients with receipt checks off (the main figure),
the same with receipt checks on, and (--daemons 2 or 4) all clients on one daemon; then the engine
with one caller and one client take turns for --single-seconds (the transport's overhead at p50).
Taking turns keeps the ratio honest on a machine whose speed moves within the run. Every call is an
ALLOW with a budget hold on one shared agent account. With --daemons 2 or 4 the clients are spread
over the daemons on one PostgreSQL, and an overspend check then races them for a $1 budget in $0.01
holds (at most 100 ALLOWs).
On PostgreSQL, "scale" says what the main figure's decisions cost the machine, the way scale is
measured where throughput cannot grow with daemons: total CPU µs per decision = (the daemons'
user+sys CPU + the CPU of the PostgreSQL backends serving them, read from /proc/PID/stat of the
pg_stat_activity pids with the daemons' own application_name) / decisions, each part shown, beside
every postgres process's CPU (WAL writer and other users included, not in the total); and the time
those backends waited on locks (pg_stat_activity sampled every 5 ms: wait_event_type 'Lock' and,
apart, 'LWLock'). "end_checks" then reads the daemons' schema: no budget account spent past its
limit, and every verdict a client was told (ALLOW, DENY or HITL; fail-closed answers are not
verdicts) found as a decision entry of its session with that call_number in any chain-shaped table.
--daemons 1,2,4 runs each count in turn (fresh schemas each), one JSON line each, then a table.
Prints one JSON line per daemon count: {"bench":"daemon","transport","store","daemons","daemon_process","clients",
"seconds","decisions","decisions_per_sec","p50_ms","p99_ms","max_ms","client_cpu_us_per_decision",
"daemon_cpu_us_per_decision","fail_closed","receipts_checked",
"engine","ratio_daemon_engine","one_client":{"daemon_p50_ms","engine_p50_ms","transport_overhead_p50_ms"},
"one_daemon","overspend_check","scale","end_checks","node"}.
Exit status: 0 measured, 1 a call failed, fewer than 99 % ALLOW, an overspend, a told verdict not in a
chain or a call decided twice, 2 bad flags or store URL.`,
    )
    .action(async (options: BenchDaemonOptions) => {
      setExit(await runBenchDaemon(options, io));
    });
}
