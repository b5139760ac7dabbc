// `leash bench daemon`: the daemon's decisions/s and round trip through @leash/client, beside the library
// engine's own figure on the same store kind, in alternating slices of one run; one JSON line. Daemons are child processes.
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
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
import { LatencyHistogram } from "./histogram.js";

export interface BenchDaemonOptions {
  readonly transport: string;
  readonly clients: number;
  readonly seconds: number;
  readonly warmup: number;
  readonly daemons: number;
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
const MIN_ALLOW_RATIO = 0.99;
/** A bench client waits this long rather than fail closed: the bench measures latency, it does not cap it. */
const CLIENT_TIMEOUT_MS = 30_000;
const ORG = "bench";

function binPath(): string {
  // This package lives in the repository beside the CLI (it is never published on its own).
  return resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "apps", "cli", "dist", "bin.js");
}

interface Figure {
  decisions: number;
  cpu_us_per_decision?: number;
  decisions_per_sec: number;
  p50_ms: number;
  p99_ms: number;
  max_ms: number;
}

const ms = (ns: number) => Number((ns / 1e6).toFixed(3));

/** One line of a child's stdout that parses as JSON with `key`, or the child's failure. */
function jsonLineOf(
  child: ChildProcess,
  key: string,
  what: string,
  timeoutMs: number,
): Promise<Record<string, unknown>> {
  return new Promise((resolveLine, reject) => {
    let stderr = "";
    child.stderr?.setEncoding("utf8").on("data", (text: string) => {
      stderr += text;
    });
    const timer = setTimeout(
      () => reject(new CliError(`bench daemon: ${what} did not answer in time`, 1)),
      timeoutMs,
    );
    createInterface({ input: child.stdout! }).on("line", (line) => {
      if (!line.startsWith("{")) return;
      try {
        const value = JSON.parse(line) as Record<string, unknown>;
        if (key in value) {
          clearTimeout(timer);
          resolveLine(value);
        }
      } catch {
        // not our line
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      const last = stderr
        .trim()
        .split("\n")
        .at(-1)
        ?.replace(/^leash: (error: )?/, "");
      reject(new CliError(`bench daemon: ${what} exited with ${code}${last ? `: ${last}` : ""}`, 1));
    });
  });
}

/** This process's environment without a signing key: every child here takes its key by flag. */
function envWithoutKey(): NodeJS.ProcessEnv {
  const { LEASH_SIGNING_KEY: _key, ...env } = process.env;
  return env;
}

interface RunningDaemon {
  readonly child: ChildProcess;
  readonly socket: string;
  readonly grpc: string | null;
}

async function startDaemon(
  url: string,
  dir: string,
  name: string,
  keyFile: string,
  config: string,
  grpc: boolean,
): Promise<RunningDaemon> {
  const socket = join(dir, `${name}.sock`);
  const child = spawn(
    process.execPath,
    [
      binPath(),
      "serve",
      "--key-file",
      keyFile,
      "--config",
      config,
      "--socket",
      socket,
      ...(grpc ? ["--grpc", "127.0.0.1:0", "--grpc-insecure"] : []),
    ],
    // The store URL through the environment: argv is visible to every user of the machine (ps).
    { stdio: ["ignore", "pipe", "pipe"], env: { ...envWithoutKey(), LEASH_STORE: url } },
  );
  const line = await jsonLineOf(child, "listening", `daemon ${name}`, 120_000);
  return { child, socket, grpc: typeof line.grpc === "string" ? line.grpc : null };
}

function stopDaemon(d: RunningDaemon): Promise<void> {
  if (d.child.exitCode !== null || d.child.signalCode !== null) return Promise.resolve();
  return new Promise((done) => {
    const force = setTimeout(() => d.child.kill("SIGKILL"), 10_000);
    d.child.once("exit", () => {
      clearTimeout(force);
      done();
    });
    d.child.kill("SIGTERM");
  });
}

/** A child's CPU time so far in µs, from /proc (Linux); null elsewhere. */
function processCpuUs(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th fields.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return null;
  }
}
/** USER_HZ: 100 on every Linux this runs on (sysconf(_SC_CLK_TCK) is not reachable from Node). */
const CLOCK_TICKS_PER_SECOND = 100;

function daemonsCpuUs(daemons: readonly RunningDaemon[]): number | null {
  let total = 0;
  for (const d of daemons) {
    const us = processCpuUs(d.child.pid);
    if (us === null) return null;
    total += us;
  }
  return total;
}

/** One caller's next call: resolves true for an ALLOW the caller may count, false for anything else. */
type Call = (caller: number, n: number) => Promise<boolean>;

/**
 * What one party (the engine, or the daemon through a set of clients) measured over its slices: the
 * slices of all parties alternate, so a machine that speeds up or slows down within the run moves
 * every figure alike and the ratio stays honest.
 */
class Meter {
  readonly histogram = new LatencyHistogram();
  decisions = 0;
  allow = 0;
  failed = 0;
  elapsedNs = 0;
  cpuUs = 0;
  daemonCpuUs: number | null = 0;
  #seq = 0;

  constructor(
    private readonly call: Call,
    private readonly callers: number,
    private readonly daemons: readonly RunningDaemon[],
  ) {}

  /** `callers` callers back to back for `seconds`; counted unless warming up. */
  async slice(seconds: number, measure: boolean): Promise<void> {
    const cpu = process.cpuUsage();
    const daemonCpu = daemonsCpuUs(this.daemons);
    const start = process.hrtime.bigint();
    const deadline = start + BigInt(Math.round(seconds * 1e9));
    await Promise.all(
      Array.from({ length: this.callers }, async (_, caller) => {
        while (process.hrtime.bigint() < deadline) {
          const t0 = process.hrtime.bigint();
          const ok = await this.call(caller, this.#seq++);
          const t = Number(process.hrtime.bigint() - t0);
          if (!measure) continue;
          this.decisions++;
          if (ok) {
            this.allow++;
            this.histogram.record(t);
          } else this.failed++;
        }
      }),
    );
    if (!measure) return;
    this.elapsedNs += Number(process.hrtime.bigint() - start);
    const { user, system } = process.cpuUsage(cpu);
    this.cpuUs += user + system;
    const daemonCpuAfter = daemonsCpuUs(this.daemons);
    this.daemonCpuUs =
      this.daemonCpuUs === null || daemonCpu === null || daemonCpuAfter === null
        ? null
        : this.daemonCpuUs + daemonCpuAfter - daemonCpu;
  }

  /** The figure, or a CliError when the run measured something other than the ALLOW path. */
  figure(what: string): Figure & { cpu_us_per_decision: number; daemon_cpu_us_per_decision: number | null } {
    if (this.decisions === 0)
      throw new CliError(`bench daemon: no ${what} call completed in the measured time`, 1);
    if (this.allow / this.decisions < MIN_ALLOW_RATIO) {
      throw new CliError(
        `bench daemon: only ${this.allow} of ${this.decisions} ${what} decisions were ALLOW; this run measured the wrong path`,
        1,
      );
    }
    return {
      decisions: this.decisions,
      decisions_per_sec: Math.round(this.allow / (this.elapsedNs / 1e9)),
      p50_ms: ms(this.histogram.quantileNs(0.5)),
      p99_ms: ms(this.histogram.quantileNs(0.99)),
      max_ms: ms(this.histogram.maxNs),
      cpu_us_per_decision: Math.round(this.cpuUs / this.decisions),
      daemon_cpu_us_per_decision:
        this.daemons.length === 0 || this.daemonCpuUs === null
          ? null
          : Math.round(this.daemonCpuUs / this.decisions),
    };
  }
}

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
) {
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
): { daemon: string; engine: string; schemas: string[] } {
  if (target.kind === "sqlite") {
    // The given URL's parameters (synchronous=NORMAL, group_commit=off, …) apply to both stores.
    const query = target.url.includes("?") ? target.url.slice(target.url.indexOf("?")) : "";
    return {
      daemon: `sqlite:${join(scratch, "daemon.db")}${query}`,
      engine: `sqlite:${join(scratch, "engine.db")}${query}`,
      schemas: [],
    };
  }
  if (target.kind === "postgres") {
    const id = randomBytes(6).toString("hex");
    const [daemon, engine] = [`leash_bench_daemon_${id}`, `leash_bench_engine_${id}`];
    const sep = target.connection.includes("?") ? "&" : "?";
    const groupCommit = target.groupCommit ? "" : "&group_commit=off";
    return {
      daemon: `${target.connection}${sep}schema=${daemon}${groupCommit}`,
      engine: `${target.connection}${sep}schema=${engine}${groupCommit}`,
      schemas: [daemon, engine],
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
  if (options.daemons !== 1 && options.daemons !== 2)
    throw new CliError("bench daemon: --daemons is 1 or 2", EXIT_BAD_INPUT);
  const target = parseStoreUrl(resolveStoreUrl(options.store, io.env, undefined));
  if (options.daemons === 2 && target.kind !== "postgres")
    throw new CliError(
      "bench daemon: --daemons 2 needs a postgres:// store (daemons share it)",
      EXIT_BAD_INPUT,
    );
  const single = options.singleSeconds ?? Math.min(options.seconds, 5);
  const scratch = mkdtempSync(
    target.kind === "sqlite"
      ? join(dirname(resolve(target.options.path)), "leash-bench-daemon-")
      : join(tmpdir(), "leash-bench-daemon-"),
  );
  const urls = freshUrls(target, scratch);
  const daemons: RunningDaemon[] = [];
  const closers: Array<() => unknown> = [];
  try {
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
    const grpc = options.transport === "grpc";
    for (let i = 0; i < options.daemons; i++)
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
    const engineMeter = await meter(engineParty(urls.engine, engineKey, n, "engine"), n, []);
    const mainMeter = await meter(daemonParty(daemons, base(false), n, "main"), n, daemons);
    const checkedMeter = await meter(daemonParty(daemons, base(true), n, "checked"), n, daemons);
    const oneDaemonMeter =
      daemons.length > 1
        ? await meter(daemonParty(daemons.slice(0, 1), base(false), n, "single"), n, daemons)
        : null;
    await alternate(
      [engineMeter, mainMeter, checkedMeter, ...(oneDaemonMeter === null ? [] : [oneDaemonMeter])],
      options.seconds,
      options.warmup,
    );
    const engineOneMeter = await meter(engineParty(urls.engine, engineKey, 1, "engine1"), 1, []);
    const oneMeter = await meter(daemonParty(daemons.slice(0, 1), base(false), 1, "one"), 1, daemons);
    await alternate([engineOneMeter, oneMeter], single, options.warmup);

    const main = mainMeter.figure("daemon");
    const checked = checkedMeter.figure("daemon (receipts checked)");
    const engine = engineMeter.figure("engine");
    const one = oneMeter.figure("one-client daemon");
    const engineOne = engineOneMeter.figure("one-caller engine");
    const oneDaemon = oneDaemonMeter?.figure("one-daemon") ?? null;
    const overspend = daemons.length > 1 ? await overspendCheck(daemons, base(false), options.clients) : null;
    const figure = (f: Figure) => ({
      decisions_per_sec: f.decisions_per_sec,
      p50_ms: f.p50_ms,
      p99_ms: f.p99_ms,
      max_ms: f.max_ms,
    });
    io.stdout(
      `${JSON.stringify({
        bench: "daemon",
        transport: options.transport,
        store: target.kind,
        daemons: options.daemons,
        // The daemons are `leash serve` child processes; the clients and the library engine run in this one.
        daemon_process: "child",
        clients: options.clients,
        seconds: options.seconds,
        decisions: main.decisions,
        ...figure(main),
        // Steadier than decisions/s on a shared machine; the engine figure's own is engine.cpu_us_per_decision.
        client_cpu_us_per_decision: main.cpu_us_per_decision,
        daemon_cpu_us_per_decision: main.daemon_cpu_us_per_decision,
        fail_closed: mainMeter.failed + checkedMeter.failed,
        receipts_checked: figure(checked),
        engine: {
          decisions_per_sec: engine.decisions_per_sec,
          p50_ms: engine.p50_ms,
          p99_ms: engine.p99_ms,
          cpu_us_per_decision: engine.cpu_us_per_decision,
        },
        ratio_daemon_engine: Number((main.decisions_per_sec / engine.decisions_per_sec).toFixed(3)),
        one_client: {
          daemon_p50_ms: one.p50_ms,
          engine_p50_ms: engineOne.p50_ms,
          transport_overhead_p50_ms: Number((one.p50_ms - engineOne.p50_ms).toFixed(3)),
        },
        one_daemon: oneDaemon === null ? null : figure(oneDaemon),
        overspend_check: overspend,
        node: process.version,
      })}\n`,
    );
    return overspend === null || overspend.zero_overspend ? 0 : 1;
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
    .option("--daemons <n>", "daemon processes sharing the store (2: postgres only)", positiveInteger, 1)
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
the same with receipt checks on, and (--daemons 2) all clients on one daemon; then the engine with
one caller and one client take turns for --single-seconds (the transport's overhead at p50). Taking
turns keeps the ratio honest on a machine whose speed moves within the run. Every call is an ALLOW
with a budget hold on one shared agent account. With --daemons 2 the clients alternate between two
daemons on one PostgreSQL, and an overspend check then races them for a $1 budget in $0.01 holds
(at most 100 ALLOWs).
Prints one JSON line: {"bench":"daemon","transport","store","daemons","daemon_process","clients",
"seconds","decisions","decisions_per_sec","p50_ms","p99_ms","max_ms","client_cpu_us_per_decision",
"daemon_cpu_us_per_decision","fail_closed","receipts_checked",
"engine","ratio_daemon_engine","one_client":{"daemon_p50_ms","engine_p50_ms","transport_overhead_p50_ms"},
"one_daemon","overspend_check","node"}.
Exit status: 0 measured, 1 a call failed, fewer than 99 % ALLOW or an overspend, 2 bad flags or store URL.`,
    )
    .action(async (options: BenchDaemonOptions) => {
      setExit(await runBenchDaemon(options, io));
    });
}
