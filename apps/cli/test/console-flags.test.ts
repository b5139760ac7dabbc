// `leash console token add` and `leash serve`'s console flags: minting a token (printed once, stored hashed)
// and every refused combination, each a one-line error before anything starts.
import { createHash, randomBytes } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { expectOneLineError, leash, scratchDir } from "./helpers.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());
const hmac = scratch.write("acme.hmac", randomBytes(32).toString("hex"));
const config = scratch.write(
  "daemon.yaml",
  `organizations:\n  acme:\n    hmac_keys: { k1: { file: ${hmac} } }\n`,
);

describe("leash console token add", () => {
  it("prints a new token once and stores only its SHA-256 with the operator", async () => {
    const file = join(scratch.dir, "tokens.json");
    const r = await leash([
      "console",
      "token",
      "add",
      "--file",
      file,
      "--operator",
      "alice",
      "--organization",
      "acme",
    ]);
    expect(r.code).toBe(0);
    const token = r.stdout.trim();
    expect(token).toMatch(/^lct_[A-Za-z0-9_-]{40,}$/);
    const stored = JSON.parse(readFileSync(file, "utf8"));
    expect(stored).toEqual({
      tokens: [
        {
          sha256: createHash("sha256").update(token).digest("hex"),
          operator: "alice",
          readonly: false,
          organizations: ["acme"],
        },
      ],
    });
    const ro = await leash([
      "console",
      "token",
      "add",
      "--file",
      file,
      "--operator",
      "auditor",
      "--readonly",
      "--organization",
      "acme",
      "--organization",
      "globex",
    ]);
    expect(ro.code).toBe(0);
    expect(JSON.parse(readFileSync(file, "utf8")).tokens[1]).toMatchObject({
      operator: "auditor",
      readonly: true,
      organizations: ["acme", "globex"],
    });
  });

  it("--token-out writes the token to a new file of mode 0600 (a shell redirect would leave it 0644), never over one", async () => {
    const file = join(scratch.dir, "out-tokens.json");
    const out = join(scratch.dir, "alice.token");
    const r = await leash([
      "console",
      "token",
      "add",
      "--file",
      file,
      "--operator",
      "alice",
      "--organization",
      "acme",
      "--token-out",
      out,
    ]);
    expect([r.code, r.stdout]).toEqual([0, ""]);
    expect(statSync(out).mode & 0o777).toBe(0o600);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const token = readFileSync(out, "utf8").trim();
    expect(JSON.parse(readFileSync(file, "utf8")).tokens[0].sha256).toBe(
      createHash("sha256").update(token).digest("hex"),
    );
    const again = await leash([
      "console",
      "token",
      "add",
      "--file",
      file,
      "--operator",
      "bob",
      "--organization",
      "acme",
      "--token-out",
      out,
    ]);
    expect(again.code).toBe(2);
    expect(readFileSync(out, "utf8").trim()).toBe(token);
    expect(JSON.parse(readFileSync(file, "utf8")).tokens).toHaveLength(1);
  });

  it("refuses a missing operator or file and a name the file cannot hold, changing nothing", async () => {
    const file = join(scratch.dir, "other.json");
    const noOp = await leash(["console", "token", "add", "--file", file]);
    expect(noOp.code).toBe(2);
    expectOneLineError(noOp.stderr);
    const noFile = await leash(["console", "token", "add", "--operator", "a"]);
    expect(noFile.code).toBe(2);
    const noOrg = await leash(["console", "token", "add", "--file", file, "--operator", "alice"]);
    expect(noOrg.code).toBe(2);
    expectOneLineError(noOrg.stderr);
    expect(noOrg.stderr).toContain("console token add needs --organization ORG");
    const badName = await leash([
      "console",
      "token",
      "add",
      "--file",
      file,
      "--operator",
      "two words",
      "--organization",
      "acme",
    ]);
    expect(badName.code).toBe(2);
    expectOneLineError(badName.stderr);
    expect(() => readFileSync(file)).toThrow();
  });
});

describe("leash serve --console", () => {
  const serve = (...extra: string[]) =>
    leash(["serve", "--config", config, "--store", "memory:", "--ephemeral-key", ...extra]);

  it("needs both flags, a HOST:PORT and a readable tokens file", async () => {
    const noTokens = await serve("--console", "127.0.0.1:0");
    expect(noTokens.code).toBe(2);
    expect(noTokens.stderr).toContain("--console needs --console-tokens FILE");
    const noConsole = await serve("--console-tokens", "x.json");
    expect(noConsole.code).toBe(2);
    expect(noConsole.stderr).toContain("--console-tokens needs --console HOST:PORT");
    const badAddress = await serve("--console", "8788", "--console-tokens", "x.json");
    expect(badAddress.code).toBe(2);
    expect(badAddress.stderr).toContain("--console wants HOST:PORT");
    const missing = await serve(
      "--console",
      "127.0.0.1:0",
      "--console-tokens",
      join(scratch.dir, "absent.json"),
    );
    expect(missing.code).toBe(2);
    expectOneLineError(missing.stderr);
    expect(missing.stderr).toContain("ENOENT");
    const broken = scratch.write("broken.json", JSON.stringify({ tokens: [{ sha256: "x", operator: "a" }] }));
    const bad = await serve("--console", "127.0.0.1:0", "--console-tokens", broken);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("sha256 must be 64 lowercase hex");
    const empty = scratch.write("empty.json", JSON.stringify({ tokens: [] }));
    expect((await serve("--console", "127.0.0.1:0", "--console-tokens", empty)).stderr).toContain(
      "holds no tokens",
    );
  });

  it("refuses the console on a non-loopback address unless --console-insecure", async () => {
    const tokens = join(scratch.dir, "org-tokens.json");
    await leash(["console", "token", "add", "--file", tokens, "--operator", "a", "--organization", "acme"]);
    const r = await serve("--console", "0.0.0.0:0", "--console-tokens", tokens);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain("is not a loopback address");
    expect(r.stderr).toContain("--console-insecure");
    const alone = await serve("--console-insecure");
    expect([alone.code, alone.stderr]).toEqual([
      2,
      "leash: error: --console-insecure needs --console HOST:PORT\n",
    ]);
  });

  it("refuses a --hitl-timeout that is not seconds > 0", async () => {
    for (const value of ["0", "-5", "soon"]) {
      const r = await serve("--hitl-timeout", value);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain("--hitl-timeout wants seconds > 0");
    }
  });

  it("--help names the console flags", async () => {
    const r = await leash(["serve", "--help"]);
    expect(r.stdout).toContain("--console <host:port>");
    expect(r.stdout).toContain("--console-tokens <file>");
    expect(r.stdout).toContain("--hitl-timeout <seconds>");
  });
});
