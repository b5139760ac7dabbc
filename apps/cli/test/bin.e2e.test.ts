// End-to-end: spawns the built `apps/cli/dist/bin.js` to prove the shebang, real streams and exit statuses.
// It needs `tsc --build` first (the root `test` script does that); it does not rebuild.
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CLI_BIN, CONFORMANCE, CONFORMANCE_101, REPO_ROOT } from "./helpers.js";

function leashBinPath(): string {
  if (!existsSync(CLI_BIN)) throw new Error(`${CLI_BIN} is missing: run \`npx tsc --build\` first`);
  return CLI_BIN;
}

function leashBin(args: string[], input?: string, cwd = REPO_ROOT, extraEnv: Record<string, string> = {}) {
  const { LEASH_STORE: _store, LEASH_SIGNING_KEY: _key, ...env } = process.env;
  return spawnSync(process.execPath, [leashBinPath(), ...args], {
    cwd,
    encoding: "utf8",
    input,
    env: { ...env, ...extraEnv },
    timeout: 30_000,
  });
}

describe("the built leash binary", () => {
  it.skipIf(process.platform === "win32")("starts from its shebang", () => {
    expect(readFileSync(leashBinPath(), "utf8").startsWith("#!/usr/bin/env node\n")).toBe(true);
    // tsc emits 0644; a package manager sets the bit when it links the bin, so do the same here.
    chmodSync(CLI_BIN, 0o755);
    const r = spawnSync(CLI_BIN, ["--version"], { encoding: "utf8", timeout: 30_000 });
    expect(r.error).toBeUndefined();
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^\d+\.\d+\.\d+/);
  });

  it("passes both published fixture files with exit 0", () => {
    const r = leashBin(["conformance", CONFORMANCE, CONFORMANCE_101]);
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe("29 passed, 0 failed\n");
    expect(r.status).toBe(0);
  });

  it("exits 2 with one line for a missing file and for an unknown flag", () => {
    const missing = leashBin(["conformance", "/nonexistent/leash.json"]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toBe("leash: error: cannot read /nonexistent/leash.json: no such file\n");
    const flag = leashBin(["hash", "--frobnicate"]);
    expect(flag.status).toBe(2);
    expect(flag.stderr).toBe("leash: error: unknown option '--frobnicate'\n");
  });

  it("evaluate --help names the HITL answer as the README does (leash hitl approve), not session resume", () => {
    const r = leashBin(["evaluate", "--help"]);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("a human decides with `leash hitl approve|reject|modify <hitl_request_id>`");
    expect(r.stdout).not.toContain("session resume");
  });

  it("reads stdin and exits 0 on a DENY", () => {
    const input = JSON.stringify({ config: {}, state: { circuit_tripped: true }, call: { tool_name: "x" } });
    const r = leashBin(["decide"], input);
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ verdict: "DENY", reason: "circuit_open" });
  });

  it("keeps state in ./leash.db by default, and exits 0 / 3 / 4 on ALLOW / DENY / HITL", () => {
    const dir = mkdtempSync(join(tmpdir(), "leash-cli-e2e-"));
    try {
      const keygen = leashBin(["keygen", "--out", "leash.key"], undefined, dir);
      expect(keygen.status).toBe(0);
      expect(statSync(join(dir, "leash.key")).mode & 0o777).toBe(0o600);
      // The key reaches the store commands through the environment, as a daemon's would.
      const env = { LEASH_SIGNING_KEY: readFileSync(join(dir, "leash.key"), "utf8") };
      const created = leashBin(
        [
          "session",
          "create",
          "--agent",
          "bot",
          "--session",
          "s1",
          "--hitl",
          "on_threshold",
          "--hitl-threshold",
          "0.5",
          "--budget",
          "1",
        ],
        undefined,
        dir,
        env,
      );
      expect(created.stderr).toBe("");
      expect(created.status).toBe(0);
      expect(existsSync(join(dir, "leash.db"))).toBe(true);
      const call = (nonce: string, estimate: string) =>
        leashBin(
          ["evaluate", "--session", "s1", "--tool", "buy", "--nonce", nonce, "--estimate", estimate],
          undefined,
          dir,
          env,
        );
      expect(call("1", "0.6").status).toBe(0);
      const hitl = call("2", "0.1");
      expect(hitl.status).toBe(4);
      expect(JSON.parse(hitl.stdout).reason).toBe("budget_threshold");
      expect(
        leashBin(
          ["session", "resume", "s1", "--decision", "reject", "--operator", "ops"],
          undefined,
          dir,
          env,
        ).status,
      ).toBe(0);
      const denied = call("2", "0.1");
      expect(denied.status).toBe(3);
      expect(JSON.parse(denied.stdout).reason).toBe("hitl_transition:reject");
      // Without a key a store command refuses to start; the chain they built verifies.
      const keyless = leashBin(["evaluate", "--session", "s1", "--tool", "buy"], undefined, dir);
      expect(keyless.status).toBe(2);
      expect(keyless.stderr).toContain("leash keygen");
      const verified = leashBin(["verify", "--pubkey", "leash.pub.hex"], undefined, dir);
      expect(verified.stderr).toBe("");
      expect(verified.stdout).toMatch(/^OK: \d+ entries verified, head [0-9a-f]{64}\n$/);
      expect(verified.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    // A dozen processes in a row, each opening the store: seconds on a busy machine.
  }, 60_000);
});
