// `leash bench engine`: concurrent evaluate() calls against a real store, one or more processes; one JSON line out.
// It measures the ALLOW path with a budget hold on one shared account, and refuses a run that measured anything else.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import {
  addKeyOptions,
  addStoreOptions,
  CliError,
  checkSigner,
  connectStore,
  dropPostgresSchema,
  EXIT_BAD_INPUT,
  engineFailure,
  firstLine,
  type Io,
  type KeyOptions,
  loadSettings,
  migrateStore,
  newEngine,
  nonNegativeNumber,
  parseStoreUrl,
  positiveInteger,
  positiveNumber,
  type ResolvedSigner,
  removeSqliteFiles,
  resolveSigner,
  type Settings,
  type StoreOptions,
  type StoreTarget,
} from "@leash/cli/internal";
import type { Substrate } from "@leash/core";
import type { Engine } from "@leash/engine";
import { type Command, Option } from "commander";
import { binPath, type Child, type ProcessReport, READY_TIMEOUT_MS, startChild } from "./engine-children.js";
import { LatencyHistogram } from "./histogram.js";
import { REFERENCE_WORKLOAD, referenceRate } from "./machine-reference.js";

export { childNodeFlags } from "./engine-children.js";

export interface BenchEngineOptions extends StoreOptions, KeyOptions {
  readonly concurrency: number;
  readonly seconds: number;
  readonly warmup: number;
  readonly processes: number;
  readonly sessions?: number;
  readonly fresh?: boolean;
  /** Seconds of the machine reference before and after the measured window; 0 skips it. */
  readonly reference: number;
  /** Internal: `RUNID:INDEX` of a child process started by a parent run. */
  readonly worker?: string;
}

/**
 * The numeric counters a store exposes as `stats` (SQLite and PostgreSQL do: transactions, COMMITs,
 * batch sizes, read-ahead rows …); {} for a store without them.
 */
function storeCounters(substrate: Substrate): Record<string, number> {
  const stats = (substrate as { stats?: unknown }).stats;
  if (typeof stats !== "object" || stats === null) return {};
  return Object.fromEntries(
    Object.entries(stats).filter((entry): entry is [string, number] => typeof entry[1] === "number"),
  );
}

/** Counters that are high-water marks, not running totals: a window keeps the later value, processes the largest. */
const HIGH_WATER = new Set(["largestBatch"]);

/** Counter movements between two readings. */
function counterDelta(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  return Object.fromEntries(
    Object.entries(after).map(([name, value]) => [
      name,
      HIGH_WATER.has(name) ? value : value - (before[name] ?? 0),
    ]),
  );
}

const WORKER_SPEC = /^([0-9a-f]{1,32}):([1-9]\d{0,3})$/;
/** Large enough that no run of any length here comes near it, so every call stays on the ALLOW path. */
const BENCH_BUDGET_USD = 1_000_000_000;
/** Non-zero so each ALLOW places a real hold on the shared account. */
const ESTIMATE_USD = 0.001;
const TOOLS = ["search", "fetch", "read_file", "list_dir", "summarize", "translate", "lookup", "write_note"];
const MIN_ALLOW_RATIO = 0.99;

const agentOf = (runId: string) => `bench-${runId}`;
const sessionIds = (runId: string, processIndex: number, count: number) =>
  Array.from({ length: count }, (_, i) => `bench-${runId}-p${processIndex}-s${i}`);

class Load {
  /** Per-process call sequence: nonces and params never repeat, across warm-up and measurement alike. */
  #seq = 0;
  #failure: unknown;
  decisions = 0;
  allow = 0;

  constructor(
    private readonly engine: Engine,
    private readonly sessions: readonly string[],
    private readonly processIndex: number,
  ) {}

  /**
   * `concurrency` callers, each awaiting its evaluate before issuing the next, until `durationNs`
   * has passed; calls in flight at the deadline finish and count. A thrown evaluate stops everyone.
   */
  async run(concurrency: number, durationNs: number, histogram?: LatencyHistogram): Promise<number> {
    const start = process.hrtime.bigint();
    const deadline = start + BigInt(Math.round(durationNs));
    const caller = async (c: number) => {
      const session_id = this.sessions[c % this.sessions.length]!;
      while (this.#failure === undefined && process.hrtime.bigint() < deadline) {
        const seq = this.#seq++;
        const t0 = process.hrtime.bigint();
        let verdict: string;
        try {
          ({ verdict } = await this.engine.evaluate({
            session_id,
            tool_name: TOOLS[seq % TOOLS.length]!,
            params: { q: `query ${seq}`, page: seq % 7, caller: c },
            nonce: `${this.processIndex}.${seq}`,
            estimated_cost_usd: ESTIMATE_USD,
          }));
        } catch (err) {
          this.#failure ??= err;
          return;
        }
        const ns = Number(process.hrtime.bigint() - t0);
        if (histogram !== undefined) {
          histogram.record(ns);
          this.decisions++;
          if (verdict === "ALLOW") this.allow++;
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, (_, c) => caller(c)));
    if (this.#failure !== undefined) throw this.#failure;
    return Number(process.hrtime.bigint() - start);
  }
}

/** Progress on a terminal only: pipes and logs get the JSON line and nothing else. */
function progress(io: Io, label: string, seconds: number, load?: Load): () => void {
  if (!io.stderrIsTTY) return () => undefined;
  const started = Date.now();
  const timer = setInterval(() => {
    const at = ((Date.now() - started) / 1000).toFixed(1);
    const done = load === undefined ? "" : `, ${load.decisions} decisions`;
    io.stderr(`\r\x1b[Kleash bench engine: ${label} ${at}/${seconds} s${done}`);
  }, 250);
  timer.unref();
  return () => {
    clearInterval(timer);
    io.stderr("\r\x1b[K");
  };
}

async function openTarget(target: StoreTarget): Promise<Substrate> {
  const substrate = await connectStore(target);
  await migrateStore(target, substrate);
  return substrate;
}

/** Measures this process's share: warm up, say ready, wait for the go, measure. */
async function measure(
  engine: Engine,
  sessions: readonly string[],
  processIndex: number,
  options: BenchEngineOptions,
  io: Io,
  ready: () => Promise<void>,
): Promise<ProcessReport> {
  const load = new Load(engine, sessions, processIndex);
  if (options.warmup > 0) {
    const done = progress(io, "warming up", options.warmup);
    try {
      await load.run(options.concurrency, options.warmup * 1e9);
    } finally {
      done();
    }
  }
  await ready();
  const histogram = new LatencyHistogram();
  const done = progress(io, "measuring", options.seconds, load);
  let elapsed: number;
  const counters = storeCounters(engine.substrate);
  const cpu = process.cpuUsage();
  try {
    elapsed = await load.run(options.concurrency, options.seconds * 1e9, histogram);
  } finally {
    done();
  }
  const { user, system } = process.cpuUsage(cpu);
  return {
    decisions: load.decisions,
    allow: load.allow,
    elapsed_ns: elapsed,
    cpu_us: user + system,
    histogram: histogram.toJSON(),
    store_stats: counterDelta(counters, storeCounters(engine.substrate)),
  };
}

/** A child's view: the parent registered the sessions; the store URL arrives in LEASH_STORE, never in argv. */
async function runWorker(spec: string, options: BenchEngineOptions, io: Io): Promise<number> {
  const match = WORKER_SPEC.exec(spec);
  if (match === null)
    throw new CliError(`bench engine: bad --worker ${JSON.stringify(spec)}`, EXIT_BAD_INPUT);
  const [, runId, index] = match;
  const settings = await loadSettings(options, io);
  const { signer } = resolveSigner(options, io);
  const substrate = await openTarget(settings.target);
  try {
    await checkSigner(substrate, settings.target, signer);
    const engine = newEngine(substrate, settings.file, signer);
    const sessions = sessionIds(runId!, Number(index), options.sessions ?? options.concurrency);
    const report = await measure(engine, sessions, Number(index), options, io, async () => {
      io.stdout(`${JSON.stringify({ ready: true })}\n`);
      // The parent closes our stdin when every process is warm: all measure the same seconds.
      await io.readStdin();
    });
    io.stdout(`${JSON.stringify(report)}\n`);
    return 0;
  } catch (err) {
    throw engineFailure(err, settings.target.url) ?? err;
  } finally {
    await substrate.close().catch(() => undefined);
  }
}

/** `--fresh`: an empty SQLite file, or a new postgres schema that the run drops when done. */
function freshTarget(target: StoreTarget): { target: StoreTarget; dropSchema?: () => Promise<void> } {
  if (target.kind === "sqlite") {
    removeSqliteFiles(target.options.path);
    return { target };
  }
  if (target.kind === "postgres") {
    const schema = `leash_bench_${randomBytes(6).toString("hex")}`;
    const url = `${target.connection}${target.connection.includes("?") ? "&" : "?"}schema=${schema}${target.groupCommit ? "" : "&group_commit=off"}`;
    return { target: parseStoreUrl(url), dropSchema: () => dropPostgresSchema(target.connection, schema) };
  }
  return { target };
}

function floorTo(value: number, places: number): number {
  const scale = 10 ** places;
  return Math.floor(value * scale) / scale;
}

/** Refuses what --processes cannot do: a memory store (one process), or children without the built CLI. */
function checkProcesses(options: BenchEngineOptions, target: StoreTarget): void {
  if (options.processes > 1 && target.kind === "memory") {
    throw new CliError(
      "bench engine: a memory: store lives in one process; --processes needs sqlite: or postgres://",
      EXIT_BAD_INPUT,
    );
  }
  if (options.processes > 1 && !existsSync(binPath())) {
    throw new CliError(
      `bench engine: --processes needs the built CLI (${binPath()}): run \`npx tsc --build\``,
      EXIT_BAD_INPUT,
    );
  }
}

/** Every process's sessions, registered before any child starts; this process's own are returned. */
async function registerSessions(
  engine: Engine,
  runId: string,
  options: BenchEngineOptions,
): Promise<string[]> {
  const perProcess = options.sessions ?? options.concurrency;
  // Registered here, before any child starts, so no two processes race to create the shared account.
  const config = { budget_usd: BENCH_BUDGET_USD, budget_scope: "agent" as const };
  const mine: string[] = [];
  for (let p = 0; p < options.processes; p++) {
    for (const session_id of sessionIds(runId, p, perProcess)) {
      await engine.register({ agent_id: agentOf(runId), session_id, config });
      if (p === 0) mine.push(session_id);
    }
  }
  return mine;
}

/** The processes' reports as one: counts and CPU summed, histograms merged, the longest window. */
function mergeReports(reports: readonly ProcessReport[]) {
  const histogram = new LatencyHistogram();
  let decisions = 0;
  let allow = 0;
  let elapsedNs = 0;
  let cpuUs = 0;
  const storeStats: Record<string, number> = {};
  for (const r of reports) {
    for (const [name, value] of Object.entries(r.store_stats ?? {})) {
      storeStats[name] = HIGH_WATER.has(name)
        ? Math.max(storeStats[name] ?? 0, value)
        : (storeStats[name] ?? 0) + value;
    }
    cpuUs += r.cpu_us;
    histogram.merge(r.histogram);
    decisions += r.decisions;
    allow += r.allow;
    // Processes measure overlapping windows; the longest one is the honest denominator.
    elapsedNs = Math.max(elapsedNs, r.elapsed_ns);
  }
  if (decisions === 0) throw new CliError("bench engine: no evaluate call completed in the measured time", 1);
  const allowRatio = allow / decisions;
  if (allowRatio < MIN_ALLOW_RATIO) {
    throw new CliError(
      `bench engine: only ${allow} of ${decisions} decisions were ALLOW (${(allowRatio * 100).toFixed(2)} %); this run measured the wrong path`,
      1,
    );
  }
  return { histogram, decisions, allowRatio, elapsedNs, cpuUs, storeStats };
}

/** The run's JSON line. */
function engineReport(
  options: BenchEngineOptions,
  target: StoreTarget,
  merged: ReturnType<typeof mergeReports>,
  signer: ResolvedSigner["signer"],
  reference: { before: number | null; after: number | null },
): string {
  const { histogram, decisions, allowRatio, elapsedNs, cpuUs, storeStats } = merged;
  const seconds = elapsedNs / 1e9;
  const ms = (ns: number) => Number((ns / 1e6).toFixed(3));
  return JSON.stringify({
    bench: "engine",
    store: target.kind,
    processes: options.processes,
    concurrency: options.concurrency,
    seconds: Number(seconds.toFixed(3)),
    decisions,
    decisions_per_sec: Math.round(decisions / seconds),
    p50_ms: ms(histogram.quantileNs(0.5)),
    p99_ms: ms(histogram.quantileNs(0.99)),
    max_ms: ms(histogram.maxNs),
    // Steadier than decisions/s on a shared machine: CPU that other tenants take is not in it.
    // The benchmark processes only (a PostgreSQL server's own CPU is not counted).
    cpu_us_per_decision: Math.round(cpuUs / decisions),
    // How fast this machine was around the run: a fixed workload, timed just before and just after.
    machine_reference:
      reference.before === null || reference.after === null
        ? null
        : {
            workload: REFERENCE_WORKLOAD,
            before_per_sec: Math.round(reference.before),
            after_per_sec: Math.round(reference.after),
          },
    allow_ratio: floorTo(allowRatio, 4),
    // Summed over the processes: for group commit, committed / commits is the mean batch size.
    store_stats: storeStats,
    // What computed the signatures: "libsodium" (sodium-native) or "node:crypto".
    signer: signer.implementation ?? "custom",
    node: process.version,
  });
}

async function runParent(options: BenchEngineOptions, io: Io): Promise<number> {
  const loaded = await loadSettings(options, io);
  const key = resolveSigner(options, io);
  checkProcesses(options, loaded.target);
  // Before anything else runs (children included), and again once they have all exited.
  const referenceBefore = options.reference > 0 ? referenceRate(key.signer, options.reference) : null;
  const fresh = options.fresh ? freshTarget(loaded.target) : { target: loaded.target };
  const settings: Settings = { ...loaded, target: fresh.target };
  const { target } = settings;
  const children: Child[] = [];
  let substrate: Substrate | undefined;
  try {
    substrate = await openTarget(target);
    await checkSigner(substrate, target, key.signer);
    const engine = newEngine(substrate, settings.file, key.signer);
    const runId = randomBytes(4).toString("hex");
    const perProcess = options.sessions ?? options.concurrency;
    const mine = await registerSessions(engine, runId, options);
    for (let p = 1; p < options.processes; p++)
      children.push(startChild(p, runId, target.url, options, perProcess, key));

    const own = await measure(engine, mine, 0, options, io, async () => {
      if (children.length === 0) return;
      const done = progress(io, `waiting for ${children.length} worker process(es)`, READY_TIMEOUT_MS / 1000);
      try {
        await Promise.all(children.map((c) => c.ready));
      } finally {
        done();
      }
      for (const child of children) child.process.stdin!.end();
    });
    const merged = mergeReports([own, ...(await Promise.all(children.map((c) => c.report)))]);
    const referenceAfter = referenceBefore === null ? null : referenceRate(key.signer, options.reference);
    const line = engineReport(options, target, merged, key.signer, {
      before: referenceBefore,
      after: referenceAfter,
    });
    io.stdout(`${line}\n`);
    return 0;
  } catch (err) {
    throw engineFailure(err, target.url) ?? err;
  } finally {
    for (const child of children) {
      if (child.process.exitCode === null && child.process.signalCode === null) child.process.kill();
    }
    await Promise.allSettled(children.map((c) => c.report));
    await substrate?.close().catch(() => undefined);
    if (fresh.dropSchema !== undefined) {
      await fresh.dropSchema().catch((err: unknown) => {
        io.stderr(`leash: warning: could not drop the benchmark schema: ${firstLine(err)}\n`);
      });
    }
  }
}

export async function runBenchEngine(options: BenchEngineOptions, io: Io): Promise<number> {
  if (options.worker !== undefined) return runWorker(options.worker, options, io);
  return runParent(options, io);
}

export function registerBenchEngine(bench: Command, io: Io, setExit: (code: number) => void): void {
  addKeyOptions(
    addStoreOptions(
      bench
        .command("engine")
        .description(
          "measure engine.evaluate() end to end on a real store: concurrent callers, optionally several processes",
        )
        .option(
          "--concurrency <n>",
          "callers per process, each issuing evaluate calls back to back",
          positiveInteger,
          16,
        )
        .option("--seconds <n>", "how long to measure", positiveNumber, 10)
        .option("--warmup <n>", "how long to run first without measuring", nonNegativeNumber, 1)
        .option(
          "--processes <n>",
          "processes sharing the store (this one plus n-1 children)",
          positiveInteger,
          1,
        )
        .option("--sessions <n>", "sessions per process (default: one per caller)", positiveInteger)
        .option(
          "--reference <seconds>",
          "time a fixed workload (signing decision entries on one thread) this long before and after the run, to show the machine's speed; 0 skips it",
          nonNegativeNumber,
          0.5,
        )
        .option(
          "--fresh",
          "start empty: delete the sqlite file (and -wal/-shm) first, or use a new postgres schema dropped afterwards",
        )
        .addOption(new Option("--worker <spec>").hideHelp()),
    ),
  )
    .addHelpText(
      "after",
      `
Every session shares one agent-scope budget, so each ALLOW takes the full path: a transaction, the
session row, a nonce insert and a budget hold on one shared account. A run with fewer than 99 % ALLOW
verdicts is an error (it measured something else). --concurrency is per process. Every decision is
signed into the audit chain, so the figures include the Ed25519 signature; worker processes get the
same key (--key-file, LEASH_SIGNING_KEY, or the --ephemeral-key's PEM through their environment).
Prints one JSON line:
{"bench":"engine","store",…,"decisions_per_sec","p50_ms","p99_ms","max_ms","cpu_us_per_decision",
"machine_reference","allow_ratio","store_stats","signer","node"}; cpu_us_per_decision is the CPU
time (all threads, user + system) of the benchmark processes per decision, steadier than
decisions_per_sec on a shared machine; machine_reference is how many signed decision entries one
thread built per second just before and just after the run (no store, no engine): how fast the
machine was around the run, to tell a slow hour from a slow build (null with --reference 0). It is
a level, not a correction factor: a shared machine's speed also moves within seconds;
signer says what computed the signatures (libsodium, or node:crypto where sodium-native does not load
or LEASH_SIGNER=node).
Exit status: 0 measured, 1 a call failed or the verdicts were not ALLOW, 2 bad flags, config, signing key or store URL.`,
    )
    .action(async (options: BenchEngineOptions) => {
      setExit(await runBenchEngine(options, io));
    });
}
