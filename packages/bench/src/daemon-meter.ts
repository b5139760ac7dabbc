// `bench daemon`'s moving parts: the daemons as `leash serve` child processes, and the Meter that runs
// one party's callers in slices and counts decisions, latency and CPU. No figures are printed here.
import { type ChildProcess, spawn } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { CliError } from "@leash/cli/internal";
import { LatencyHistogram } from "./histogram.js";
import { procCpu } from "./pg-probe.js";

const MIN_ALLOW_RATIO = 0.99;

export function binPath(): string {
  // This package lives in the repository beside the CLI (it is never published on its own).
  return resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "apps", "cli", "dist", "bin.js");
}

export interface Figure {
  decisions: number;
  cpu_us_per_decision?: number;
  decisions_per_sec: number;
  p50_ms: number;
  p99_ms: number;
  max_ms: number;
}

export const ms = (ns: number) => Number((ns / 1e6).toFixed(3));

/** One line of a child's stdout that parses as JSON with `key`, or the child's failure. */
export function jsonLineOf(
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

export interface RunningDaemon {
  readonly child: ChildProcess;
  readonly socket: string;
  readonly grpc: string | null;
}

export async function startDaemon(
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

export function stopDaemon(d: RunningDaemon): Promise<void> {
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

function daemonsCpuUs(daemons: readonly RunningDaemon[]): number | null {
  let total = 0;
  for (const d of daemons) {
    const us = d.child.pid === undefined ? null : (procCpu(d.child.pid)?.us ?? null);
    if (us === null) return null;
    total += us;
  }
  return total;
}

/** One caller's next call: resolves true for an ALLOW the caller may count, false for anything else. */
export type Call = (caller: number, n: number) => Promise<boolean>;

/**
 * What one party (the engine, or the daemon through a set of clients) measured over its slices: the
 * slices of all parties alternate, so a machine that speeds up or slows down within the run moves
 * every figure alike and the ratio stays honest.
 */
export class Meter {
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
    /** Brackets each measured slice (the PostgreSQL probe of the main figure). */
    private readonly probe?: { begin(): Promise<void>; end(): Promise<void> },
  ) {}

  /** `callers` callers back to back for `seconds`; counted unless warming up. */
  async slice(seconds: number, measure: boolean): Promise<void> {
    if (measure) await this.probe?.begin();
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
    await this.probe?.end();
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
