// Shared test plumbing: the published fixtures' location and an in-process `leash` run with captured streams.
// It copies no fixtures into the repo; CI places shared/ beside the repository, and so do these paths.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { generateKeyPair, writeKeyFiles } from "@leash/chain";
import { run } from "../src/program.js";

export const REPO_ROOT = resolve(fileURLToPath(new URL(".", import.meta.url)), "..", "..", "..");
export const FIXTURES_DIR = resolve(REPO_ROOT, "..", "shared", "spec", "fixtures");
export const CONFORMANCE = join(FIXTURES_DIR, "conformance.json");
export const CONFORMANCE_101 = join(FIXTURES_DIR, "conformance-1.0.1.json");
export const CLI_BIN = join(REPO_ROOT, "apps", "cli", "dist", "bin.js");

export interface Captured {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Where `leash serve` and `leash recover` keep their checkpoints in these tests (not the home directory). */
export const STATE_DIR = mkdtempSync(join(tmpdir(), "leash-cli-state-"));
process.once("exit", () => rmSync(STATE_DIR, { recursive: true, force: true }));
// `leash serve` children spawned with this process's environment keep theirs there too.
process.env.LEASH_STATE_DIR ??= STATE_DIR;

/**
 * Runs `leash argv…` in-process; `stdin` is what the command reads for `-` or no file. The environment
 * is `env` alone (plus LEASH_STATE_DIR, this file's STATE_DIR, unless `env` names one), so a
 * LEASH_STORE in the caller's shell cannot redirect a test.
 */
export async function leash(
  argv: readonly string[],
  stdin = "",
  givenEnv: Record<string, string> = {},
): Promise<Captured> {
  const env = { LEASH_STATE_DIR: STATE_DIR, ...givenEnv };
  let stdout = "";
  let stderr = "";
  const code = await run(argv, {
    stdout: (text) => {
      stdout += text;
    },
    stderr: (text) => {
      stderr += text;
    },
    readStdin: async () => stdin,
    stderrIsTTY: false,
    stdinIsTTY: false,
    env,
  });
  return { code, stdout, stderr };
}

/** A scratch directory per test file, removed by the returned cleanup. */
export function scratchDir(): { dir: string; write(name: string, text: string): string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), "leash-cli-"));
  return {
    dir,
    write(name, text) {
      const path = join(dir, name);
      // 0600: key and token files are refused when others can read them, and any of these may be one.
      writeFileSync(path, text, { mode: 0o600 });
      return path;
    },
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** A message for humans, not a crash: exactly one line, and nothing that looks like a stack frame. */
export function expectOneLineError(stderr: string): void {
  const lines = stderr.split("\n").filter((l) => l !== "");
  if (lines.length !== 1) throw new Error(`expected one stderr line, got ${lines.length}:\n${stderr}`);
  if (/^\s+at /m.test(stderr) || /Error:.*\n\s+at /.test(stderr)) throw new Error(`stack trace:\n${stderr}`);
}

export interface TestKey {
  /** The private key file (mode 0600), for --key-file. */
  readonly file: string;
  /** The `.pub.hex` and `.pub.pem` beside it (`keyFilePathsFor`), for --pubkey. */
  readonly pubHex: string;
  readonly pubPem: string;
  readonly publicKeyHex: string;
  readonly keyId: string;
  /** The PEM, for LEASH_SIGNING_KEY. */
  readonly pem: string;
}

/** A signing key written the way `leash keygen --out DIR/NAME` writes one. */
export function testKey(dir: string, name = "leash.key"): TestKey {
  const pair = generateKeyPair();
  const file = join(dir, name);
  const paths = writeKeyFiles(pair, file);
  return {
    file,
    pubHex: paths.publicKeyHexPath,
    pubPem: paths.publicKeyPath,
    publicKeyHex: pair.publicKeyHex,
    keyId: pair.keyId,
    pem: pair.privateKeyPem,
  };
}

/** The reference's canonical_hash, run by python3 itself: sha256 of json.dumps(json.loads(text), …). */
const PYTHON_CANONICAL_HASH = `
import hashlib, json, sys
params = json.loads(sys.stdin.read())
try:
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
except ValueError:
    print("not canonicalizable")
else:
    print(hashlib.sha256(text.encode("utf-8")).hexdigest())
`;

/** What the Python reference computes for this JSON text: its digest, or null when it has none. */
export function pythonCanonicalHash(jsonText: string): string | null {
  const r = spawnSync("/usr/bin/python3", ["-c", PYTHON_CANONICAL_HASH], {
    input: jsonText,
    encoding: "utf8",
    timeout: 30_000,
  });
  if (r.status !== 0) throw new Error(`python3 failed: ${r.error ?? r.stderr}`);
  const out = r.stdout.trim();
  return out === "not canonicalizable" ? null : out;
}

/** Number literals whose digest depends on their text: Python reads each as a float or a big int. */
export const TEXT_SENSITIVE_NUMBERS = [
  "1e16",
  "1e+16",
  "1.5e300",
  "10.0",
  "-0.0",
  "1E5",
  "12345678901234567890",
  "9007199254740993",
  "-1e-400",
] as const;
