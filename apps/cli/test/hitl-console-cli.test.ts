// `leash hitl … --console URL` as the built binary against a real daemon (SQLite) and its HITL console:
// an agent's guarded call pauses, the operator lists, shows and approves it; tokens decide who answers.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import { type Client, createClient, guard } from "@leash/client";
import { type Daemon, parseDaemonConfig, startDaemon, tokenHash } from "@leash/daemon";
import { openStore, type TestStore } from "@leash/test-stores";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI_BIN, pythonCanonicalHash, REPO_ROOT } from "./helpers.js";

const HMAC = randomBytes(32);
const ALICE = `lct_${randomBytes(24).toString("base64url")}`;
const VIEWER = `lct_${randomBytes(24).toString("base64url")}`;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The binary, spawned without blocking: the daemon under test lives in this process's event loop. */
function bin(args: string[], env: Record<string, string> = {}): Promise<Run> {
  if (!existsSync(CLI_BIN)) throw new Error(`${CLI_BIN} is missing: run \`npx tsc --build\` first`);
  const { LEASH_STORE: _s, LEASH_CONSOLE_TOKEN: _t, ...rest } = process.env;
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_BIN, ...args],
      { cwd: REPO_ROOT, encoding: "utf8", env: { ...rest, ...env }, timeout: 30_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : null;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

describe("leash hitl --console against a daemon on sqlite", () => {
  let dir: string;
  let store: TestStore;
  let daemon: Daemon;
  let client: Client;
  let aliceFile: string;
  let viewerFile: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "leash-hitl-console-cli-"));
    writeFileSync(join(dir, "acme.hmac"), HMAC.toString("hex"), { mode: 0o600 });
    aliceFile = join(dir, "alice.token");
    viewerFile = join(dir, "viewer.token");
    writeFileSync(aliceFile, `${ALICE}\n`, { mode: 0o600 });
    writeFileSync(viewerFile, `${VIEWER}\n`, { mode: 0o600 });
    store = await openStore("sqlite", { label: "hitlconsolecli" });
    daemon = await startDaemon({
      config: parseDaemonConfig({
        organizations: {
          acme: {
            hmac_keys: { k1: { file: join(dir, "acme.hmac") } },
            agents: { "ops-bot": { guard: { hitl_mode: "always" } } },
          },
        },
      }),
      signer: generateKeyPair().signer,
      store: store.url!,
      socketPath: join(dir, "leash.sock"),
      logger: pino({ level: "silent" }),
      console: {
        listen: "127.0.0.1:0",
        tokens: [
          { sha256: tokenHash(ALICE), operator: "alice", readonly: false, organizations: ["acme"] },
          { sha256: tokenHash(VIEWER), operator: "viewer", readonly: true, organizations: ["acme"] },
        ],
      },
    });
    client = createClient({
      socketPath: daemon.address,
      organizationId: "acme",
      agentId: "ops-bot",
      hmacKey: HMAC,
      keyId: "k1",
      timeoutMs: 10_000,
      heartbeatIntervalMs: 0,
    });
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await daemon?.close();
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** An agent's guarded call that waits for a human; resolves once its request is pending. */
  async function pausedCall(params: Record<string, unknown>) {
    const { session_id } = await client.register();
    const ran: unknown[] = [];
    const send = guard(client, { session_id, tool_name: "send_email" }, async (p: unknown) => {
      ran.push(p);
      return "sent";
    });
    const call = send(params);
    call.catch(() => undefined); // awaited by the test; a failure before that must not go unhandled
    let id = "";
    await expect
      .poll(async () => {
        const pending = await daemon.engine.listHitl({ sessionId: session_id, status: "pending" });
        id = pending[0]?.request_id ?? "";
        return id;
      })
      .not.toBe("");
    return { session: session_id, id, call, ran };
  }

  it("list and show the paused call; approve records the token's operator; a second answer is refused", async () => {
    const url = daemon.consoleUrl!;
    const { session, id, call, ran } = await pausedCall({ to: "ops@example.com", amount: 10 });

    // The token from the environment.
    const listed = await bin(["hitl", "list", "--console", url, "--status", "pending"], {
      LEASH_CONSOLE_TOKEN: ALICE,
    });
    expect([listed.code, listed.stderr]).toEqual([0, ""]);
    expect(listed.stdout).toMatch(
      new RegExp(`^${id}  pending   send_email  session ${session} call 1  expires \\d{4}-`, "m"),
    );

    const shown = await bin(["hitl", "show", id, "--console", url, "--token-file", viewerFile]);
    expect([shown.code, shown.stderr]).toEqual([0, ""]);
    expect(shown.stdout).toContain(`request  ${id}\n`);
    expect(shown.stdout).toContain(
      `digest   ${pythonCanonicalHash('{"amount":10,"to":"ops@example.com"}')}\n`,
    );
    expect(shown.stdout).toContain('params\n  {\n    "amount": 10,\n    "to": "ops@example.com"\n  }');

    // A read-only token cannot answer: one line, exit 1, nothing changes.
    const readOnly = await bin(["hitl", "approve", id, "--console", url, "--token-file", viewerFile]);
    expect([readOnly.code, readOnly.stdout]).toEqual([1, ""]);
    expect(readOnly.stderr).toMatch(/^leash: error: .*read-only.* \(hitl_read_only\)\n$/);
    expect((await daemon.engine.getHitl(id)).status).toBe("pending");

    const approved = await bin([
      "hitl",
      "approve",
      id,
      "--console",
      url,
      "--token-file",
      aliceFile,
      "--comment",
      "known address",
    ]);
    expect([approved.code, approved.stderr]).toEqual([0, ""]);
    expect(JSON.parse(approved.stdout)).toMatchObject({
      request_id: id,
      decision: "approve",
      operator_id: "alice",
      comment: "known address",
    });
    await expect(call).resolves.toBe("sent");
    expect(ran).toEqual([{ to: "ops@example.com", amount: 10 }]);
    expect((await daemon.engine.getHitl(id)).operator_id).toBe("alice");

    const twice = await bin(["hitl", "approve", id, "--console", url, "--token-file", aliceFile]);
    expect([twice.code, twice.stdout]).toEqual([1, ""]);
    expect(twice.stderr).toMatch(
      /^leash: error: request .* already answered: approve.* \(hitl_already_decided\)\n$/,
    );
  }, 90_000);

  it("refuses a bad token, --operator, --store with --console, and a missing token, each in one line", async () => {
    const url = daemon.consoleUrl!;
    const { id, call } = await pausedCall({ to: "x@example.com" });
    const badFile = join(dir, "bad.token");
    writeFileSync(badFile, "lct_not-a-token\n", { mode: 0o600 });
    // A token is a secret: a file others can read is refused before it is sent, as a signing key is.
    const looseFile = join(dir, "loose.token");
    writeFileSync(looseFile, `${ALICE}\n`, { mode: 0o644 });
    chmodSync(looseFile, 0o644);
    const loose = await bin(["hitl", "approve", id, "--console", url, "--token-file", looseFile]);
    expect([loose.code, loose.stdout, loose.stderr]).toEqual([
      2,
      "",
      `leash: error: --token-file: ${looseFile} is readable by group or others (mode 0644); run: chmod 600 ${looseFile}\n`,
    ]);

    const bad = await bin(["hitl", "approve", id, "--console", url, "--token-file", badFile]);
    expect([bad.code, bad.stdout, bad.stderr]).toEqual([
      1,
      "",
      "leash: error: the console refused the token (HTTP 401)\n",
    ]);
    const operator = await bin([
      "hitl",
      "reject",
      id,
      "--console",
      url,
      "--token-file",
      aliceFile,
      "--operator",
      "mallory",
    ]);
    expect([operator.code, operator.stdout]).toEqual([2, ""]);
    expect(operator.stderr).toBe(
      "leash: error: --operator is refused with --console: the daemon records the console token's operator\n",
    );
    const both = await bin([
      "hitl",
      "list",
      "--console",
      url,
      "--store",
      `sqlite:${join(dir, "other.db")}`,
      "--token-file",
      aliceFile,
    ]);
    expect([both.code, both.stdout]).toEqual([2, ""]);
    expect(both.stderr).toMatch(/^leash: error: --store\/--config and --console are mutually exclusive/);
    const none = await bin(["hitl", "list", "--console", url]);
    expect([none.code, none.stderr]).toEqual([
      2,
      "leash: error: --console needs an operator token: --token-file FILE or $LEASH_CONSOLE_TOKEN\n",
    ]);
    // Nothing was answered: the request still waits; reject it so the agent's call ends.
    expect((await daemon.engine.getHitl(id)).status).toBe("pending");
    const rejected = await bin(["hitl", "reject", id, "--console", url, "--token-file", aliceFile]);
    expect(rejected.code).toBe(0);
    expect(JSON.parse(rejected.stdout)).toMatchObject({ decision: "reject", operator_id: "alice" });
    await expect(call).rejects.toThrow();
  }, 90_000);
});
