// `leash bench daemon`: the daemon's decisions/s and round trip through @leash/client, beside the library
// engine's own figure on the same store kind in the same run; one JSON line. Daemons are child processes.
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { generateKeyPair } from "@leash/chain";
import { type Client, type ClientOptions, createClient } from "@leash/client";
import type { Command } from "commander";
import { nonNegativeNumber, positiveInteger, positiveNumber } from "../args.js";
import { LatencyHistogram } from "../histogram.js";
import { CliError, EXIT_BAD_INPUT, firstLine, type Io } from "../io.js";
import { dropPostgresSchema, parseStoreUrl, resolveStoreUrl, type StoreTarget } from "../store.js";

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
  return resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "dist", "bin.js");
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

/** The library engine's own figure: `leash bench engine` in a child process, on a fresh store of the same kind. */
async function engineFigure(
  url: string,
  concurrency: number,
  seconds: number,
  warmup: number,
): Promise<Figure> {
  const child = spawn(
    process.execPath,
    [
      binPath(),
      "bench",
      "engine",
      "--ephemeral-key",
      "--fresh",
      "--concurrency",
      String(concurrency),
      "--seconds",
      String(seconds),
      "--warmup",
      String(warmup),
      "--reference",
      "0",
    ],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...envWithoutKey(), LEASH_STORE: url } },
  );
  const r = await jsonLineOf(
    child,
    "decisions_per_sec",
    "the engine benchmark",
    (seconds + warmup) * 1000 + 120_000,
  );
  return {
    decisions: Number(r.decisions),
    decisions_per_sec: Number(r.decisions_per_sec),
    p50_ms: Number(r.p50_ms),
    p99_ms: Number(r.p99_ms),
    max_ms: Number(r.max_ms),
    cpu_us_per_decision: Number(r.cpu_us_per_decision),
  };
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

interface LoadResult extends Figure {
  allow: number;
  fail_closed: number;
  /** CPU (user + system) per decision in the measured window: this process (the clients), the daemons. */
  client_cpu_us_per_decision: number;
  daemon_cpu_us_per_decision: number | null;
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

/**
 * `clients` clients, one session each, each awaiting its preExec before the next, spread over `daemons`
 * in turn; warm up, then measure `seconds`. Calls in flight at the deadline finish and count.
 */
async function clientLoad(
  daemons: readonly RunningDaemon[],
  base: (d: RunningDaemon) => ClientOptions,
  clients: number,
  seconds: number,
  warmup: number,
  tag: string,
): Promise<LoadResult> {
  const opened: Client[] =
    daemons.length === 0
      ? []
      : Array.from({ length: clients }, (_, i) => createClient(base(daemons[i % daemons.length]!)));
  try {
    const sessions = await Promise.all(opened.map((c) => c.register().then((r) => r.session_id)));
    let seq = 0;
    let allow = 0;
    let failClosed = 0;
    let decisions = 0;
    const histogram = new LatencyHistogram();
    const run = async (ns: number, measure: boolean) => {
      const deadline = process.hrtime.bigint() + BigInt(Math.round(ns));
      const start = process.hrtime.bigint();
      await Promise.all(
        opened.map(async (c, i) => {
          while (process.hrtime.bigint() < deadline) {
            const n = seq++;
            const t0 = process.hrtime.bigint();
            const r = await c.preExec({
              session_id: sessions[i]!,
              tool_name: TOOLS[n % TOOLS.length]!,
              params: { q: `query ${n}`, page: n % 7, caller: i },
              nonce: `${tag}.${n}`,
              estimated_cost_usd: ESTIMATE_USD,
            });
            const t = Number(process.hrtime.bigint() - t0);
            if (!measure) continue;
            decisions++;
            if (r.fail_closed) failClosed++;
            else if (r.verdict === "ALLOW") {
              allow++;
              histogram.record(t);
            }
          }
        }),
      );
      return Number(process.hrtime.bigint() - start);
    };
    if (warmup > 0) await run(warmup * 1e9, false);
    const cpu = process.cpuUsage();
    const daemonCpu = daemonsCpuUs(daemons);
    const elapsed = await run(seconds * 1e9, true);
    const { user, system } = process.cpuUsage(cpu);
    const daemonCpuAfter = daemonsCpuUs(daemons);
    if (decisions === 0) throw new CliError("bench daemon: no preExec completed in the measured time", 1);
    if (allow / decisions < MIN_ALLOW_RATIO) {
      throw new CliError(
        `bench daemon: only ${allow} of ${decisions} decisions were ALLOW (${failClosed} failed closed); this run measured the wrong path`,
        1,
      );
    }
    return {
      decisions,
      decisions_per_sec: Math.round(allow / (elapsed / 1e9)),
      p50_ms: ms(histogram.quantileNs(0.5)),
      p99_ms: ms(histogram.quantileNs(0.99)),
      max_ms: ms(histogram.maxNs),
      allow,
      fail_closed: failClosed,
      client_cpu_us_per_decision: Math.round((user + system) / decisions),
      daemon_cpu_us_per_decision:
        daemonCpu === null || daemonCpuAfter === null
          ? null
          : Math.round((daemonCpuAfter - daemonCpu) / decisions),
    };
  } finally {
    for (const c of opened) c.close();
  }
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
              if (r.reason === "budget_exhausted") return;
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
    return {
      daemon: `sqlite:${join(scratch, "daemon.db")}`,
      engine: `sqlite:${join(scratch, "engine.db")}`,
      schemas: [],
    };
  }
  if (target.kind === "postgres") {
    const schema = `leash_bench_daemon_${randomBytes(6).toString("hex")}`;
    const sep = target.connection.includes("?") ? "&" : "?";
    // The engine figure's --fresh makes (and drops) a schema of its own.
    return {
      daemon: `${target.connection}${sep}schema=${schema}`,
      engine: target.connection,
      schemas: [schema],
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
  try {
    // The library engine first, alone on the machine, on its own fresh store of the same kind.
    const engine = await engineFigure(urls.engine, options.clients, options.seconds, options.warmup);
    const engineOne = await engineFigure(urls.engine, 1, single, options.warmup);

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

    const main = await clientLoad(
      daemons,
      base(false),
      options.clients,
      options.seconds,
      options.warmup,
      "main",
    );
    const checked = await clientLoad(
      daemons,
      base(true),
      options.clients,
      options.seconds,
      options.warmup,
      "checked",
    );
    const one = await clientLoad(daemons.slice(0, 1), base(false), 1, single, options.warmup, "one");
    const oneDaemon =
      daemons.length > 1
        ? await clientLoad(
            daemons.slice(0, 1),
            base(false),
            options.clients,
            options.seconds,
            options.warmup,
            "single",
          )
        : null;
    const overspend = daemons.length > 1 ? await overspendCheck(daemons, base(false), options.clients) : null;
    const figure = (f: LoadResult) => ({
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
        // The daemons are `leash serve` child processes; the clients run in this process.
        daemon_process: "child",
        clients: options.clients,
        seconds: options.seconds,
        decisions: main.decisions,
        ...figure(main),
        // Steadier than decisions/s on a shared machine; the engine figure's own is engine.cpu_us_per_decision.
        client_cpu_us_per_decision: main.client_cpu_us_per_decision,
        daemon_cpu_us_per_decision: main.daemon_cpu_us_per_decision,
        fail_closed: main.fail_closed + checked.fail_closed,
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
Runs, in order: the library engine (\`leash bench engine\` in a child process, --clients callers, then
one), on a fresh store of the same kind; then the daemon (\`leash serve\` child processes, an
ephemeral key, fresh store) driven by --clients @leash/client clients in this process — receipt checks
off (the main figure), then on, then one client. Every call is an ALLOW with a budget hold on one
shared agent account. With --daemons 2 the clients alternate between two daemons on one PostgreSQL,
a second figure has all of them on one daemon, and an overspend check races the clients for a $1
budget in $0.01 holds (at most 100 ALLOWs).
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
