// Test set-up for the daemon: a config with a fresh HMAC key file, a signing key, real stores (SQLite file,
// PostgreSQL schema) from @leash/test-stores, and a daemon in process on a real socket. No mocks.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { generateKeyPair } from "@leash/chain";
import { openStore as openTestStore, STATE_DIR, type StoreKind, type TestStore } from "@leash/test-stores";
import { pino } from "pino";
import {
  type ConsoleOptions,
  type Daemon,
  type GrpcOptions,
  parseDaemonConfig,
  startDaemon,
} from "../src/index.js";
import type { ClientKey } from "./raw-client.js";

export const ACME: ClientKey = { key: randomBytes(32), keyId: "acme-k1" };
export const GLOBEX: ClientKey = { key: randomBytes(32), keyId: "globex-k1" };

/** The daemon config of the tests: research-bot gets Appendix A's policy (budget 0.50, max_repeat 3), and may never run delete_file. */
export function configObject(dir: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const keyFile = join(dir, "acme-k1.hmac");
  writeFileSync(keyFile, Buffer.from(ACME.key).toString("hex"), { mode: 0o600 });
  return {
    organizations: {
      acme: {
        hmac_keys: { [ACME.keyId]: { file: keyFile } },
        default_guard: { budget_usd: 1 },
        agents: {
          "research-bot": { guard: { budget_usd: 0.5, max_repeat_calls: 3, denied_tools: ["delete_file"] } },
        },
      },
      globex: { hmac_keys: { [GLOBEX.keyId]: { hex: Buffer.from(GLOBEX.key).toString("hex") } } },
    },
    ...extra,
  };
}

export const scratchDir = (): string => mkdtempSync(join(tmpdir(), "leash-daemon-"));

export const openStore = (kind: StoreKind): Promise<TestStore> => openTestStore(kind, { label: "daemon" });

export const quietLogger = () => pino({ level: "silent" });

export interface Running {
  readonly daemon: Daemon;
  readonly store: TestStore;
  readonly key: ReturnType<typeof generateKeyPair>;
  readonly dir: string;
  readonly socket: string;
  stop(): Promise<void>;
}

/** A daemon in this process on a real socket over a fresh real store. */
export async function runDaemon(
  kind: StoreKind,
  options: {
    http?: string;
    grpc?: GrpcOptions;
    extra?: Record<string, unknown>;
    maxInFlight?: number;
    maxLongPolls?: number;
    console?: ConsoleOptions;
  } = {},
): Promise<Running> {
  const store = await openStore(kind);
  const dir = scratchDir();
  const key = generateKeyPair();
  const socket = join(dir, "leash.sock");
  const config = parseDaemonConfig(configObject(dir, options.extra ?? {}));
  const daemon = await startDaemon({
    config,
    signer: key.signer,
    store: store.url ?? "memory:",
    socketPath: socket,
    logger: quietLogger(),
    ...(options.http === undefined ? {} : { http: options.http }),
    ...(options.grpc === undefined ? {} : { grpc: options.grpc }),
    ...(options.maxInFlight === undefined ? {} : { maxInFlight: options.maxInFlight }),
    ...(options.maxLongPolls === undefined ? {} : { maxLongPolls: options.maxLongPolls }),
    ...(options.console === undefined ? {} : { console: options.console }),
  });
  return {
    daemon,
    store,
    key,
    dir,
    socket,
    async stop() {
      await daemon.close();
      await store.close();
    },
  };
}

let built = false;
/** The kill test runs the built CLI (`leash serve`): bring dist up to date (incremental, about a second when current). */
export function ensureBuilt(): void {
  if (built) return;
  const root = new URL("../../../", import.meta.url).pathname;
  execFileSync(`${root}node_modules/.bin/tsc`, ["--build"], { cwd: root, stdio: "inherit" });
  built = true;
}

const BIN = fileURLToPath(new URL("../../../apps/cli/dist/bin.js", import.meta.url));

/** Starts `leash serve` and resolves once it prints its listening line (parsed as `listening`). */
export function serve(
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ child: ChildProcess; stderr: () => string; listening: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    // LEASH_STATE_DIR: the daemon's checkpoints go to a temporary directory, not the home directory.
    const child = spawn(process.execPath, [BIN, "serve", ...args], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...env, LEASH_STATE_DIR: STATE_DIR },
    });
    let out = "";
    let err = "";
    const timer = setTimeout(() => reject(new Error(`serve did not start:\n${err}`)), 30_000);
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      out += chunk;
      // Only whole lines: the listening line may arrive in pieces.
      const whole = out.slice(0, out.lastIndexOf("\n") + 1).split("\n");
      const line = whole.find((l) => l.startsWith('{"listening"'));
      if (line !== undefined) {
        clearTimeout(timer);
        resolve({ child, stderr: () => err, listening: JSON.parse(line) as Record<string, unknown> });
      }
    });
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
      err += chunk;
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited with ${code} before listening:\n${err}`));
    });
  });
}
