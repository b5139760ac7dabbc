// Real `leash serve` daemon processes and one-shot `leash` commands for tests: the built CLI as a child
// process, a config file written for it, the listening line parsed. It starts nothing in this process.
import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const BIN = join(ROOT, "apps/cli/dist/bin.js");

/**
 * Where the `leash serve` and `leash recover` children keep their checkpoints (LEASH_STATE_DIR), unless
 * a test names its own: a temporary directory per test process, never the home directory.
 */
export const STATE_DIR = mkdtempSync(join(tmpdir(), "leash-test-state-"));
process.once("exit", () => rmSync(STATE_DIR, { recursive: true, force: true }));
// Children a test spawns itself (with this process's environment) keep theirs there too.
process.env.LEASH_STATE_DIR ??= STATE_DIR;

let built = false;
/** `leash` runs from dist: bring it up to date (incremental, about a second when current). */
export function ensureBuilt(): void {
  if (built) return;
  execFileSync(join(ROOT, "node_modules/.bin/tsc"), ["--build"], { cwd: ROOT, stdio: "inherit" });
  built = true;
}

/** The JSON line `leash serve` prints once it listens. */
export interface Listening {
  listening: string;
  grpc: string | null;
  /** The HITL console's URL (with `--console`). */
  console: string | null;
  public_key: string;
}

export interface ServeProcess {
  readonly child: ChildProcess;
  readonly listening: Listening;
  stderr(): string;
  /** SIGTERM, SIGKILL after 10 s; resolves once it exited. */
  stop(): Promise<void>;
}

/** Writes `config` (JSON) into `dir` and returns its path. */
export function writeConfig(dir: string, name: string, config: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify(config), { mode: 0o600 });
  return path;
}

/** Starts `leash serve ARGS` and resolves with its listening line. */
export function serve(args: readonly string[], env: Record<string, string> = {}): Promise<ServeProcess> {
  ensureBuilt();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, "serve", ...args], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, LEASH_STATE_DIR: STATE_DIR, ...env },
    });
    let out = "";
    let err = "";
    const exited = new Promise<void>((done) => child.once("exit", () => done()));
    const timer = setTimeout(() => reject(new Error(`serve did not start:\n${err}`)), 60_000);
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      out += chunk;
      const line = out.split("\n").find((l) => l.startsWith('{"listening"'));
      if (line === undefined) return;
      clearTimeout(timer);
      resolve({
        child,
        listening: JSON.parse(line) as Listening,
        stderr: () => err,
        async stop() {
          if (child.exitCode !== null || child.signalCode !== null) return;
          child.kill("SIGCONT");
          child.kill("SIGTERM");
          const force = setTimeout(() => child.kill("SIGKILL"), 10_000);
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
      reject(new Error(`serve exited with ${code} before listening:\n${err}`));
    });
  });
}

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `leash ARGS` (the built binary) to its end without blocking this process's event loop. The
 * environment is this process's without LEASH_STORE and LEASH_CONSOLE_TOKEN, with LEASH_STATE_DIR, plus `env`.
 */
export function leashCli(args: readonly string[], env: Record<string, string> = {}): Promise<CliRun> {
  ensureBuilt();
  const { LEASH_STORE: _store, LEASH_CONSOLE_TOKEN: _token, ...rest } = process.env;
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { cwd: ROOT, encoding: "utf8", env: { ...rest, LEASH_STATE_DIR: STATE_DIR, ...env }, timeout: 60_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : null;
        resolve({ code, stdout, stderr });
      },
    );
  });
}
