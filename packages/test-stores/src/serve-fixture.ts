// One organization's real `leash serve` on a SQLite file, set up the way an operator would: `leash keygen`,
// an HMAC key file, a config file, `leash console token add`. For end-to-end tests of agents over the daemon.
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type CliRun, leashCli, type ServeProcess, serve, writeConfig } from "./serve.js";

export interface ServeFixtureOptions {
  /** The organization's agents and their policies, as in the daemon's config file. */
  agents: Record<string, { guard: Record<string, unknown> }>;
  /** Also serve gRPC, plaintext on loopback (`--grpc 127.0.0.1:0 --grpc-insecure`). */
  grpc?: boolean;
  /** Also serve the HITL console with one operator, `alice` (`--console 127.0.0.1:0`). */
  console?: boolean;
  /** `--hitl-timeout S` for policies without one. */
  hitlTimeoutS?: number;
  /** `--policy FILE`: an operator's policy file (@leash/policy). */
  policyFile?: string;
}

export interface ServeFixture {
  readonly process: ServeProcess;
  readonly dir: string;
  /** `sqlite:PATH` of the daemon's store. */
  readonly store: string;
  readonly socketPath: string;
  /** The gRPC address (`grpc: true`), else null. */
  readonly grpcAddress: string | null;
  /** The console's URL and alice's token file (`console: true`), else null. */
  readonly consoleUrl: string | null;
  readonly operatorTokenFile: string | null;
  /** What an agent of organization "acme" needs: its HMAC key (hex) and key id, the daemon's public key. */
  readonly organizationId: "acme";
  readonly hmacKey: string;
  readonly keyId: "k1";
  readonly publicKeyHex: string;
  /** Runs `leash ARGS` (the built CLI). */
  cli(args: readonly string[]): Promise<CliRun>;
  /** `leash verify --store STORE --pubkey KEY`. */
  verify(): Promise<CliRun>;
  /** The store's chain as `leash export --format jsonl` prints it, each line's body parsed. */
  entries(): Promise<Array<{ kind: string; data: Record<string, unknown> }>>;
  /** Stops the daemon (idempotent). */
  stop(): Promise<void>;
  /** Stops the daemon and deletes its directory. */
  remove(): Promise<void>;
}

const ok = (run: CliRun, what: string): CliRun => {
  if (run.code !== 0) throw new Error(`${what} failed (${run.code}): ${run.stderr}`);
  return run;
};

/** `leash console token add` for operator alice of acme into `tokens`; her token's file, mode 0600. */
async function mintAliceToken(dir: string, tokens: string): Promise<string> {
  const minted = ok(
    await leashCli([
      "console",
      "token",
      "add",
      "--file",
      tokens,
      "--operator",
      "alice",
      "--organization",
      "acme",
    ]),
    "leash console token add",
  );
  const operatorTokenFile = join(dir, "alice.token");
  writeFileSync(operatorTokenFile, minted.stdout, { mode: 0o600 });
  return operatorTokenFile;
}

/** The store's chain as `leash export --format jsonl` prints it, each line's body parsed. */
async function exportedEntries(
  cli: (args: readonly string[]) => Promise<CliRun>,
  store: string,
): Promise<Array<{ kind: string; data: Record<string, unknown> }>> {
  const run = ok(await cli(["export", "--format", "jsonl", "--store", store]), "leash export");
  return run.stdout
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      // The export prints each entry's body as JSON, not as the signed text.
      const entry = JSON.parse(line) as { kind: string; body: { data: Record<string, unknown> } };
      return { kind: entry.kind, data: entry.body.data };
    });
}

export async function startServeFixture(options: ServeFixtureOptions): Promise<ServeFixture> {
  const dir = mkdtempSync(join(tmpdir(), "leash-serve-fixture-"));
  try {
    const hmacKey = randomBytes(32).toString("hex");
    writeFileSync(join(dir, "acme-k1.hmac"), hmacKey, { mode: 0o600 });
    ok(await leashCli(["keygen", "--out", join(dir, "leash.key")]), "leash keygen");
    const publicKeyHex = readFileSync(join(dir, "leash.pub.hex"), "utf8").trim();
    const store = `sqlite:${join(dir, "leash.db")}`;
    const config = writeConfig(dir, "daemon.json", {
      store,
      organizations: {
        acme: { hmac_keys: { k1: { file: join(dir, "acme-k1.hmac") } }, agents: options.agents },
      },
    });
    const socketPath = join(dir, "leash.sock");
    const args = ["--config", config, "--key-file", join(dir, "leash.key"), "--socket", socketPath];
    if (options.grpc) args.push("--grpc", "127.0.0.1:0", "--grpc-insecure");
    if (options.hitlTimeoutS !== undefined) args.push("--hitl-timeout", String(options.hitlTimeoutS));
    if (options.policyFile !== undefined) args.push("--policy", options.policyFile);
    let operatorTokenFile: string | null = null;
    if (options.console) {
      const tokens = join(dir, "tokens.json");
      operatorTokenFile = await mintAliceToken(dir, tokens);
      args.push("--console", "127.0.0.1:0", "--console-tokens", tokens);
    }
    const process = await serve(args);
    if (process.listening.public_key !== publicKeyHex) {
      await process.stop();
      throw new Error("leash serve signs with another key than the one it was given");
    }
    const cli = (cliArgs: readonly string[]) => leashCli(cliArgs);
    return {
      process,
      dir,
      store,
      socketPath,
      grpcAddress: process.listening.grpc,
      consoleUrl: process.listening.console,
      operatorTokenFile,
      organizationId: "acme",
      hmacKey,
      keyId: "k1",
      publicKeyHex,
      cli,
      verify: () => cli(["verify", "--store", store, "--pubkey", join(dir, "leash.pub.hex")]),
      entries: () => exportedEntries(cli, store),
      stop: () => process.stop(),
      async remove() {
        await process.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}
