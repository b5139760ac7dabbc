// The root README's runnable blocks (fenced blocks tagged `test:NAME`) and a newcomer's machine to run
// them on: a fresh HOME and npm prefix, `leash` linked as the README says. It asserts nothing itself.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { REPO_ROOT } from "./helpers.js";

export interface Block {
  readonly lang: string;
  readonly code: string;
}

/** Every `test:NAME` block of the README, by name (a name used twice is an error). */
export function readmeBlocks(): Map<string, Block> {
  const text = readFileSync(join(REPO_ROOT, "README.md"), "utf8");
  const blocks = new Map<string, Block>();
  for (const m of text.matchAll(/^```(\w+) test:([\w-]+)\n([\s\S]*?)\n```$/gm)) {
    const [, lang, name, code] = m as unknown as [string, string, string, string];
    if (blocks.has(name)) throw new Error(`README: two blocks are named test:${name}`);
    blocks.set(name, { lang, code });
  }
  return blocks;
}

export function block(name: string): Block {
  const found = readmeBlocks().get(name);
  if (found === undefined) throw new Error(`README has no block tagged test:${name}`);
  return found;
}

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A newcomer: an empty HOME and npm global prefix, and an environment without the developer's settings. */
export class Newcomer {
  readonly root = mkdtempSync(join(tmpdir(), "leash-readme-"));
  readonly home = join(this.root, "home");
  readonly prefix = join(this.root, "npm-global");
  readonly env: Record<string, string>;

  constructor() {
    mkdirSync(this.home);
    mkdirSync(this.prefix);

    const inherited = Object.fromEntries(
      Object.entries(process.env).filter(
        // Not the developer's LEASH_*, nor the npm_config_* that `npx vitest` exports (its prefix,
        // cache and user config would send `npm link` and every install to the developer's folders).
        (e): e is [string, string] =>
          e[1] !== undefined && !e[0].startsWith("LEASH_") && !/^npm_/i.test(e[0]),
      ),
    );
    this.env = {
      ...inherited,
      HOME: this.home,
      // Where node-gyp cannot download Node's headers (the README's set-up note).
      npm_config_nodedir: process.env.npm_config_nodedir ?? "/usr",
      PATH: `${join(this.prefix, "bin")}:${process.env.PATH ?? ""}`,
    };
  }

  /** Runs shell text with bash -e (so a failing line fails the run), in the clone unless told. */
  bash(
    script: string,
    options: { cwd?: string; env?: Record<string, string>; timeoutMs?: number } = {},
  ): Promise<Run> {
    return new Promise((resolve) => {
      const child = spawn("bash", ["-e", "-c", script], {
        cwd: options.cwd ?? REPO_ROOT,
        env: { ...this.env, ...options.env },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.setEncoding("utf8").on("data", (c: string) => {
        stdout += c;
      });
      child.stderr.setEncoding("utf8").on("data", (c: string) => {
        stderr += c;
      });
      const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 120_000);
      child.on("close", (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });
  }

  /**
   * The README's `npm link` block, into this newcomer's own global folder (npm's prefix, given to that
   * one command only: set for all, it would also move local installs and npx there).
   */
  link(): Promise<Run> {
    return this.bash(block("link").code, { env: { npm_config_prefix: this.prefix } });
  }

  /** Starts a long-running block (`leash serve …`) and resolves once it prints its `listening` line. */
  background(script: string): Promise<{ child: ChildProcess; listening: Record<string, unknown> }> {
    return new Promise((resolve, reject) => {
      // exec: the shell becomes the daemon, so its pid is the one to stop.
      const child = spawn("bash", ["-e", "-c", `exec ${script.trim()}`], {
        cwd: REPO_ROOT,
        env: this.env,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      let err = "";
      const timer = setTimeout(() => reject(new Error(`did not start:\n${err}`)), 60_000);
      child.stdout!.setEncoding("utf8").on("data", (c: string) => {
        out += c;
        const line = out
          .slice(0, out.lastIndexOf("\n") + 1)
          .split("\n")
          .find((l) => l.startsWith('{"listening"'));
        if (line !== undefined) {
          clearTimeout(timer);
          resolve({ child, listening: JSON.parse(line) as Record<string, unknown> });
        }
      });
      child.stderr!.setEncoding("utf8").on("data", (c: string) => {
        err += c;
      });
      child.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`exited with ${code} before listening:\n${err}`));
      });
    });
  }

  cleanup(): void {
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** Stops a background block and waits for it to exit. */
export async function stop(child: ChildProcess | undefined): Promise<void> {
  if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  await exited;
}

/** The shared/ folder beside the clone (the SP/1.0 fixtures); LEASH_SHARED_DIR overrides. */
export const SHARED_DIR = process.env.LEASH_SHARED_DIR ?? join(REPO_ROOT, "..", "shared");
