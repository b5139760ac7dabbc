// `leash mcp --daemon` end to end: a real `leash serve` (SQLite, web console, an operator token) as a child
// process, the built `leash mcp` in front of the test server, the SDK's Client; operators answer with `leash hitl --console`.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ChainEntryRecord } from "@leash/core";
import { tokenHash } from "@leash/daemon";
import { verifyReceipt } from "@leash/receipts";
import { openStore, type TestStore } from "@leash/test-stores";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  CLI,
  ensureBuilt,
  firstText,
  type Proxied,
  proxied,
  TEST_SERVER,
  type Workspace,
  workspace,
} from "./harness.js";

const TIMEOUT = 90_000;
const OPERATOR_TOKEN = `lct_${randomBytes(24).toString("base64url")}`;

interface Decision {
  verdict: string;
  reason: string;
  receipt: string | null;
  session_id: string;
  call_number: number;
  hitl_request_id?: string | null;
}

interface Serving {
  listening: string;
  console: string;
  public_key: string;
}

let ws: Workspace;
let store: TestStore;
let daemon: ChildProcess;
let serving: Serving;
let hmacFile: string;
let tokenFile: string;
let open: Proxied[] = [];

/** The built CLI, without blocking this process's event loop (the proxies' clients live in it). */
function leash(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { cwd: ws.dir, encoding: "utf8", timeout: 30_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : null;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

beforeAll(async () => {
  ensureBuilt();
  ws = workspace();
  hmacFile = join(ws.dir, "acme-k1.hmac");
  writeFileSync(hmacFile, randomBytes(32).toString("hex"), { mode: 0o600 });
  tokenFile = join(ws.dir, "alice.token");
  writeFileSync(tokenFile, `${OPERATOR_TOKEN}\n`, { mode: 0o600 });
  const tokens = join(ws.dir, "console-tokens.json");
  writeFileSync(
    tokens,
    JSON.stringify({
      tokens: [
        { sha256: tokenHash(OPERATOR_TOKEN), operator: "alice", readonly: false, organizations: ["acme"] },
      ],
    }),
    { mode: 0o600 },
  );
  // Policies are the daemon's: every call of notes-bot needs a human, delete_all is never allowed.
  const config = join(ws.dir, "daemon.yaml");
  writeFileSync(
    config,
    `organizations:\n  acme:\n    hmac_keys: { k1: { file: ${hmacFile} } }\n    agents:\n      notes-bot: { guard: { hitl_mode: always, denied_tools: [delete_all] } }\n      hasty-bot: { guard: { hitl_mode: always, hitl_timeout_s: 2 } }\n`,
  );
  store = await openStore("sqlite", { label: "mcpdaemon" });
  daemon = spawn(
    process.execPath,
    [
      CLI,
      "serve",
      "--config",
      config,
      "--store",
      store.url as string,
      "--key-file",
      ws.keyFile,
      "--socket",
      join(ws.dir, "leash.sock"),
      "--console",
      "127.0.0.1:0",
      "--console-tokens",
      tokens,
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  serving = await new Promise<Serving>((resolve, reject) => {
    let out = "";
    let err = "";
    daemon.stderr?.on("data", (chunk: Buffer) => {
      err += chunk.toString("utf8");
    });
    daemon.stdout?.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
      if (out.includes("\n")) resolve(JSON.parse(out.split("\n")[0] as string) as Serving);
    });
    daemon.once("exit", (code) => reject(new Error(`leash serve exited ${code}: ${err}`)));
  });
}, TIMEOUT);

afterEach(async () => {
  await Promise.allSettled(open.map((p) => p.close()));
  open = [];
});

afterAll(async () => {
  if (daemon !== undefined && daemon.exitCode === null) {
    const exited = new Promise((resolve) => daemon.once("exit", resolve));
    daemon.kill("SIGTERM");
    await exited;
  }
  await store?.close();
});

async function start(
  options: Parameters<typeof proxied>[2] = {},
  agent = "notes-bot",
): Promise<{ proxy: Proxied; sessionId: string }> {
  const proxy = await proxied(
    ws,
    [
      "--daemon",
      serving.listening,
      "--org",
      "acme",
      "--agent",
      agent,
      "--hmac-key-file",
      hmacFile,
      "--hmac-key-id",
      "k1",
      "--daemon-pubkey",
      serving.public_key,
      "--daemon-timeout",
      "10000", // a shared 2-core host: SQLite commits can exceed the 50 ms default
      "--",
      process.execPath,
      TEST_SERVER,
    ],
    options,
  );
  open.push(proxy);
  const sessionId = /session (\S+) \(daemon mode\)/.exec(proxy.stderr())?.[1];
  expect(sessionId).toBeDefined();
  return { proxy, sessionId: sessionId as string };
}

/** The session's pending request, as an operator sees it through the console (polled until there is one). */
async function pendingRequest(sessionId: string): Promise<{ request_id: string; tool_name: string }> {
  let found: { request_id: string; tool_name: string } | undefined;
  await expect
    .poll(
      async () => {
        const listed = await leash([
          "hitl",
          "list",
          "--console",
          serving.console,
          "--token-file",
          tokenFile,
          "--session",
          sessionId,
          "--status",
          "pending",
          "--json",
        ]);
        expect(listed.stderr).toBe("");
        found = (JSON.parse(listed.stdout) as { request_id: string; tool_name: string }[])[0];
        return found !== undefined;
      },
      { timeout: 30_000, interval: 200 },
    )
    .toBe(true);
  return found as { request_id: string; tool_name: string };
}

async function answer(decision: string, id: string, ...more: string[]): Promise<void> {
  const answered = await leash([
    "hitl",
    decision,
    id,
    "--console",
    serving.console,
    "--token-file",
    tokenFile,
    ...more,
  ]);
  expect([answered.code, answered.stderr]).toEqual([0, ""]);
}

async function decisionsOf(sessionId: string): Promise<Record<string, unknown>[]> {
  const rows: ChainEntryRecord[] = await store.substrate.transaction((tx) => tx.chain.range(0, 1_000_000));
  return rows
    .map((row) => JSON.parse(row.body) as { kind: string; data: Record<string, unknown> })
    .filter((e) => e.data.session_id === sessionId && (e.kind === "decision" || e.kind === "hitl_decision"))
    .map((e) => ({ kind: e.kind, ...e.data }));
}

describe("leash mcp --daemon and a human on the daemon", () => {
  it(
    "waits for the operator's approval on the console (never the agent's elicitation), then forwards the call exactly once",
    async () => {
      // The agent's client could answer an elicitation, but no answer given there is an approver's.
      const asked: unknown[] = [];
      const { proxy, sessionId } = await start({
        capabilities: { elicitation: { form: {} } },
        setup: (c) =>
          c.setRequestHandler(ElicitRequestSchema, async (request) => {
            asked.push(request.params);
            return { action: "accept", content: { decision: "approve" } };
          }),
      });
      const call = proxy.client.callTool({ name: "echo", arguments: { text: "needs a human" } });
      const pending = await pendingRequest(sessionId);
      expect(pending.tool_name).toBe("echo");
      expect(ws.calls()).toEqual([]); // paused: the server has not seen it
      await answer("approve", pending.request_id, "--comment", "fine");
      const result = await call;
      expect(result.isError).not.toBe(true);
      expect(firstText(result)).toBe("echo: needs a human");
      expect(ws.calls().map((c) => c.args)).toEqual([{ text: "needs a human" }]);
      expect(asked).toEqual([]);
      const recorded = await decisionsOf(sessionId);
      expect(recorded.map((d) => [d.kind, d.reason ?? d.decision, d.operator_id ?? null])).toEqual([
        ["decision", "hitl_all_calls", null],
        ["hitl_decision", "approve", "alice"],
        ["decision", "hitl_transition:approve", null],
      ]);
    },
    TIMEOUT,
  );

  it(
    "runs the operator's modified params under the successor nonce",
    async () => {
      const { proxy, sessionId } = await start();
      const call = proxy.client.callTool({ name: "echo", arguments: { text: "draft" } });
      const pending = await pendingRequest(sessionId);
      await answer("modify", pending.request_id, "--params", '{"text":"edited"}');
      expect(firstText(await call)).toBe("echo: edited");
      expect(ws.calls().map((c) => c.args)).toContainEqual({ text: "edited" });
      expect(ws.calls().map((c) => c.args)).not.toContainEqual({ text: "draft" });
      const released = (await decisionsOf(sessionId)).filter((d) => d.kind === "decision").at(-1);
      expect(released?.reason).toBe("hitl_transition:modify_successor");
    },
    TIMEOUT,
  );

  it(
    "a rejected call never reaches the server: a recorded DENY with words and a receipt",
    async () => {
      const { proxy, sessionId } = await start();
      const before = ws.calls().length;
      const call = proxy.client.callTool({ name: "echo", arguments: { text: "reject me" } });
      const pending = await pendingRequest(sessionId);
      await answer("reject", pending.request_id);
      const result = await call;
      expect(result.isError).toBe(true);
      const denied = result.structuredContent as unknown as Decision;
      expect(denied).toMatchObject({ verdict: "DENY", reason: "hitl_transition:reject" });
      expect(firstText(result)).toContain("a human reviewed this call and rejected it");
      const checked = await verifyReceipt(denied.receipt as string, serving.public_key);
      expect(checked.ok && checked.payload.data.reason).toBe("hitl_transition:reject");
      expect(ws.calls()).toHaveLength(before);
    },
    TIMEOUT,
  );

  it(
    "a request nobody answers expires into the recorded DENY hitl_timeout, in the same tools/call",
    async () => {
      const { proxy, sessionId } = await start({}, "hasty-bot");
      const before = ws.calls().length;
      const result = await proxy.client.callTool({ name: "echo", arguments: { text: "too late" } });
      const denied = result.structuredContent as unknown as Decision;
      expect(denied).toMatchObject({ verdict: "DENY", reason: "hitl_timeout" });
      expect(firstText(result)).toContain("nobody approved this call in time");
      expect((await verifyReceipt(denied.receipt as string, serving.public_key)).ok).toBe(true);
      expect(ws.calls()).toHaveLength(before);
      const reasons = (await decisionsOf(sessionId))
        .filter((d) => d.kind === "decision")
        .map((d) => d.reason);
      expect(reasons).toEqual(["hitl_all_calls", "hitl_timeout"]);
    },
    TIMEOUT,
  );

  it(
    "a cancelled tools/call stops waiting: the later approval runs nothing until the same call is sent again",
    async () => {
      const { proxy, sessionId } = await start();
      const before = ws.calls().length;
      const abort = new AbortController();
      const call = proxy.client.callTool({ name: "echo", arguments: { text: "cancel me" } }, undefined, {
        signal: abort.signal,
      });
      const pending = await pendingRequest(sessionId);
      abort.abort("the user pressed stop");
      await expect(call).rejects.toThrow();
      await expect.poll(() => proxy.stderr(), { timeout: 10_000 }).toContain("stopped waiting");
      await answer("approve", pending.request_id);
      // Sent again, the same call is re-dispatched with the paused nonce and runs once.
      const again = await proxy.client.callTool({ name: "echo", arguments: { text: "cancel me" } });
      expect(firstText(again)).toBe("echo: cancel me");
      expect(
        ws
          .calls()
          .slice(before)
          .map((c) => c.args),
      ).toEqual([{ text: "cancel me" }]);
      // One release only: the cancelled wait did not re-dispatch the approved call.
      const reasons = (await decisionsOf(sessionId))
        .filter((d) => d.kind === "decision")
        .map((d) => d.reason);
      expect(reasons).toEqual(["hitl_all_calls", "hitl_transition:approve"]);
    },
    TIMEOUT,
  );

  it(
    "a tool the daemon's guard denies (denied_tools) is a recorded DENY with a receipt, no human asked",
    async () => {
      const { proxy, sessionId } = await start();
      const before = ws.calls().length;
      const result = await proxy.client.callTool({ name: "delete_all", arguments: {} });
      const denied = result.structuredContent as unknown as Decision;
      expect(denied).toMatchObject({ verdict: "DENY", reason: "policy_violation:tool_denied" });
      const checked = await verifyReceipt(denied.receipt as string, serving.public_key);
      expect(checked.ok && checked.payload.data.tool_name).toBe("delete_all");
      expect(ws.calls()).toHaveLength(before);
      expect((await decisionsOf(sessionId)).map((d) => d.reason)).toEqual(["policy_violation:tool_denied"]);
    },
    TIMEOUT,
  );

  it(
    "refuses tools' hitl or deny policies with --daemon (the daemon's config decides), starting nothing",
    async () => {
      const config = ws.writeConfig("tools:\n  delete_all: { policy: deny }\n");
      const refused = await leash([
        "mcp",
        "--config",
        config,
        "--daemon",
        serving.listening,
        "--org",
        "acme",
        "--agent",
        "notes-bot",
        "--hmac-key-file",
        hmacFile,
        "--",
        process.execPath,
        TEST_SERVER,
      ]);
      expect(refused.code).toBe(2);
      expect(refused.stderr.trim().split("\n")).toEqual([
        "leash: error: tools.<name>.policy deny needs library mode: with --daemon the daemon's policy decides (denied_tools in the agent's guard there)",
      ]);
    },
    TIMEOUT,
  );
});
