// `bench engine --processes N`'s worker processes: each started as `leash bench engine --worker`, its
// ready line awaited and its report read back. What a worker measures is bench-engine.ts's.
import { type ChildProcess, spawn } from "node:child_process";
import { dirname, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { CliError, type ResolvedSigner } from "@leash/cli/internal";
import type { HistogramJson } from "./histogram.js";

/** What one process measured; children print it as one JSON line for the parent to merge. */
export interface ProcessReport {
  readonly decisions: number;
  readonly allow: number;
  readonly elapsed_ns: number;
  /** CPU time (user + system, all threads) this process spent in the measured window, in µs. */
  readonly cpu_us: number;
  readonly histogram: HistogramJson;
  /** How the store's own counters (its `stats`, when it has them) moved in the measured window. */
  readonly store_stats: Record<string, number>;
}

/** How long a parent waits for its children to open the store and warm up. */
export const READY_TIMEOUT_MS = 120_000;

/** The built binary children run: tests import this module from src, but node runs only dist. */
export function binPath(): string {
  // This package lives in the repository beside the CLI (it is never published on its own).
  return resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "apps", "cli", "dist", "bin.js");
}

export interface Child {
  readonly index: number;
  readonly process: ChildProcess;
  readonly ready: Promise<void>;
  readonly report: Promise<ProcessReport>;
}

/** How a worker gets the parent's key: the same file, or the PEM in LEASH_SIGNING_KEY (never in argv). */
function childKey(key: ResolvedSigner): { args: string[]; env: Record<string, string> } {
  switch (key.source.kind) {
    case "file":
      return { args: ["--key-file", resolve(key.source.path)], env: {} };
    case "env":
      return { args: [], env: { LEASH_SIGNING_KEY: key.source.text } };
    case "ephemeral":
      return { args: [], env: { LEASH_SIGNING_KEY: key.source.privateKeyPem } };
  }
}

/**
 * The Node.js flags a child process inherits from this one, so that `node --cpu-prof … bench engine
 * --processes 2` profiles every process, not just the first: profiler and heap-size flags only. Not
 * the debugger's (each child would claim the same port), a profile's file name (each would overwrite
 * the others'), nor loaders and the like that a host such as a test runner may have added.
 */
const INHERITED_NODE_FLAG =
  /^--(cpu-prof|cpu-prof-dir|cpu-prof-interval|heap-prof|heap-prof-dir|heap-prof-interval|prof|max-old-space-size|max-semi-space-size)(=|$)/;

export function childNodeFlags(execArgv: readonly string[]): string[] {
  return execArgv.filter((flag) => INHERITED_NODE_FLAG.test(flag));
}

/** What a worker is told to run: the parent's own settings. */
export interface WorkerSettings {
  readonly concurrency: number;
  readonly seconds: number;
  readonly warmup: number;
  readonly config?: string;
}

export function startChild(
  index: number,
  runId: string,
  url: string,
  options: WorkerSettings,
  sessionsPerProcess: number,
  key: ResolvedSigner,
): Child {
  const child = spawnWorker(index, runId, url, options, sessionsPerProcess, key);
  const { nextLine, exited, failure } = readLines(child, index);
  const ready = (async () => {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(failure("did not get ready in time")), READY_TIMEOUT_MS);
    });
    try {
      const line = await Promise.race([nextLine(), timeout]);
      if (line === undefined) throw failure("exited before it was ready");
      if (line !== JSON.stringify({ ready: true }))
        throw failure(`said ${JSON.stringify(line)} instead of ready`);
    } finally {
      clearTimeout(timer);
    }
  })();
  const report = (async () => {
    await ready;
    const line = await nextLine();
    const code = await exited;
    if (line === undefined || code !== 0) throw failure(`failed (exit status ${code})`);
    try {
      return JSON.parse(line) as ProcessReport;
    } catch {
      throw failure(`printed an unreadable report ${JSON.stringify(line.slice(0, 80))}`);
    }
  })();
  // Either may be abandoned when another process fails first; never as an unhandled rejection.
  ready.catch(() => undefined);
  report.catch(() => undefined);
  return { index, process: child, ready, report };
}

function spawnWorker(
  index: number,
  runId: string,
  url: string,
  options: WorkerSettings,
  sessionsPerProcess: number,
  key: ResolvedSigner,
): ChildProcess {
  const keyArgs = childKey(key);
  const args = [
    binPath(),
    "bench",
    "engine",
    "--worker",
    `${runId}:${index}`,
    "--concurrency",
    String(options.concurrency),
    "--seconds",
    String(options.seconds),
    "--warmup",
    String(options.warmup),
    "--sessions",
    String(sessionsPerProcess),
    ...(options.config === undefined ? [] : ["--config", resolve(options.config)]),
    ...keyArgs.args,
  ];
  // The URL and a key go through the environment: argv is visible to every user of the machine (ps).
  const { LEASH_SIGNING_KEY: _parentKey, ...parentEnv } = process.env;
  return spawn(process.execPath, [...childNodeFlags(process.execArgv), ...args], {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...parentEnv, LEASH_STORE: url, ...keyArgs.env },
  });
}

/** The worker's stdout lines one at a time, its exit, and a failure that quotes its last stderr line. */
function readLines(child: ChildProcess, index: number) {
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (text: string) => {
    stderr += text;
  });
  const lines: string[] = [];
  const waiters: Array<() => void> = [];
  createInterface({ input: child.stdout! }).on("line", (line) => {
    lines.push(line);
    for (const wake of waiters.splice(0)) wake();
  });
  const exited = new Promise<number | null>((resolveExit) => {
    child.on("error", (err) => {
      stderr += `${err.message}\n`;
      resolveExit(null);
    });
    child.on("close", (code) => resolveExit(code));
  });
  const failure = (what: string) => {
    const last = stderr
      .trim()
      .split("\n")
      .at(-1)
      ?.replace(/^leash: (error: )?/, "");
    return new CliError(`bench engine: worker process ${index} ${what}${last ? `: ${last}` : ""}`, 1);
  };
  const nextLine = async (): Promise<string | undefined> => {
    while (lines.length === 0) {
      const more = new Promise<void>((wake) => waiters.push(wake));
      const code = await Promise.race([more.then(() => undefined), exited.then((c) => ({ c }))]);
      if (code !== undefined && lines.length === 0) return undefined;
    }
    return lines.shift();
  };
  return { nextLine, exited, failure };
}
