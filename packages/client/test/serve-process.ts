// Real `leash serve` daemon processes for the client's tests (SIGSTOP, two daemons on one PostgreSQL):
// the built CLI, a config file with the organization's HMAC key, and the listening line parsed.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const BIN = join(ROOT, "apps/cli/dist/bin.js");

let built = false;
/** `leash serve` runs from dist: bring it up to date (incremental, about a second when current). */
export function ensureBuilt(): void {
  if (built) return;
  execFileSync(join(ROOT, "node_modules/.bin/tsc"), ["--build"], { cwd: ROOT, stdio: "inherit" });
  built = true;
}

export interface Listening {
  listening: string;
  grpc: string | null;
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
      env: { ...process.env, ...env },
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
