// `leash mcp` end to end: the SDK's real Client over stdio → the built CLI → the test MCP server, on a real
// store. What reaches the server is read from the server's own call log, what Leash decided from its chain.
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import type { ChainEntryRecord } from "@leash/core";
import { parseDaemonConfig, startDaemon } from "@leash/daemon";
import { createEngine } from "@leash/engine";
import { verifyReceipt } from "@leash/receipts";
import { openStore, type TestStore } from "@leash/test-stores";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import {
  firstText,
  httpTestServer,
  type Proxied,
  proxied,
  runCli,
  TEST_SERVER,
  workspace,
} from "./harness.js";

const TIMEOUT = 60_000;

interface Decision {
  verdict: string;
  reason: string;
  receipt: string | null;
  session_id: string;
  call_number: number;
  budget_remaining_usd: string | null;
  hitl_request_id?: string | null;
}

async function entries(store: TestStore): Promise<{ kind: string; data: Record<string, unknown> }[]> {
  const rows: ChainEntryRecord[] = await store.substrate.transaction((tx) => tx.chain.range(0, 1_000_000));
  return rows.map((row) => JSON.parse(row.body));
}

let open: Proxied[] = [];
let stores: TestStore[] = [];
afterEach(async () => {
  await Promise.allSettled(open.map((p) => p.close()));
  await Promise.allSettled(stores.map((s) => s.close()));
  open = [];
  stores = [];
});

async function setup(
  yaml: string,
  options: Parameters<typeof proxied>[2] & { kind?: "sqlite" | "postgres"; upstream?: string[] } = {},
) {
  const ws = workspace();
  const store = await openStore(options.kind ?? "sqlite", { label: "mcp" });
  stores.push(store);
  const config = ws.writeConfig(yaml);
  const proxy = await proxied(
    ws,
    [
      "--config",
      config,
      "--store",
      store.url as string,
      "--key-file",
      ws.keyFile,
      ...(options.upstream ?? ["--", process.execPath, TEST_SERVER]),
    ],
    options,
  );
  open.push(proxy);
  return { ws, store, proxy, client: proxy.client };
}

describe("leash mcp (through the built CLI)", () => {
  it(
    "passes tools/list, resources, prompts and the server's identity through unchanged",
    async () => {
      const { client } = await setup("guard: {}\n");
      expect(client.getServerVersion()).toMatchObject({ name: "leash-test-server", version: "1.2.3" });
      expect(client.getInstructions()).toBe("test server");
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name).sort()).toEqual([
        "crash",
        "delete_all",
        "echo",
        "fail",
        "paid",
        "slow",
        "stats",
      ]);
      expect(tools.find((t) => t.name === "echo")?.inputSchema).toMatchObject({
        properties: { text: { type: "string" } },
      });
      const resources = await client.listResources();
      expect(resources.resources.map((r) => r.uri)).toEqual(["memo://hello"]);
      const memo = await client.readResource({ uri: "memo://hello" });
      expect(memo.contents[0]).toMatchObject({ text: "hello from the resource" });
      const prompt = await client.getPrompt({ name: "greet", arguments: { name: "Ada" } });
      expect(prompt.messages[0]?.content).toMatchObject({ text: "Say hello to Ada" });
    },
    TIMEOUT,
  );

  it(
    "forwards allowed calls with their trace context and records each decision with a receipt",
    async () => {
      const { ws, store, client } = await setup("guard: { max_repeat_calls: 5 }\n");
      const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
      const result = await client.callTool({
        name: "echo",
        arguments: { text: "hi" },
        _meta: { traceparent },
      });
      expect(result.isError).toBeFalsy();
      expect(firstText(result)).toBe("echo: hi");
      await client.callTool({ name: "echo", arguments: { text: "again" } });
      const calls = ws.calls();
      expect(calls.map((c) => [c.tool, c.args])).toEqual([
        ["echo", { text: "hi" }],
        ["echo", { text: "again" }],
      ]);
      expect(calls[0]?.meta).toMatchObject({ traceparent });
      const decisions = (await entries(store)).filter((e) => e.kind === "decision");
      expect(decisions.map((d) => [d.data.tool_name, d.data.verdict])).toEqual([
        ["echo", "ALLOW"],
        ["echo", "ALLOW"],
      ]);
      // One nonce per call, never derived from the call's content.
      expect(decisions[0]?.data.nonce).not.toEqual(decisions[1]?.data.nonce);
    },
    TIMEOUT,
  );

  it(
    "stops a loop of identical failing calls (error amplification, then the open circuit); the server sees only the allowed ones",
    async () => {
      const { ws, store, client } = await setup(
        "guard: { max_repeat_calls: 3, error_amplification: true }\n",
      );
      const results = [];
      for (let i = 0; i < 4; i++) results.push(await client.callTool({ name: "fail", arguments: { id: 7 } }));
      // The first two reach the server and fail there; the third is stopped by the 401 the results reported.
      expect(results.map((r) => r.isError)).toEqual([true, true, true, true]);
      expect(firstText(results[0]!)).toContain("401 Unauthorized");
      const decisions = results.slice(2).map((r) => r.structuredContent as unknown as Decision);
      expect(decisions.map((d) => [d.verdict, d.reason])).toEqual([
        ["DENY", "error_amplified_repeat"],
        ["DENY", "circuit_open"],
      ]);
      expect(firstText(results[2]!)).toMatch(/^Leash denied the call to "fail": the same call keeps failing/);
      expect(firstText(results[2]!)).toContain("The tool did not run");
      expect(ws.calls().map((c) => c.tool)).toEqual(["fail", "fail"]);
      // The receipt is the decision's signed chain entry, checkable offline.
      const checked = await verifyReceipt(decisions[0]!.receipt!, ws.publicKeyHex);
      expect(checked.ok && checked.payload.data.reason).toBe("error_amplified_repeat");
      // The failures were settled as failures, with the error text.
      const settled = (await entries(store)).filter((e) => e.kind === "decision");
      expect(settled[1]?.data.previous_error).toBe("HTTP 401 Unauthorized: token expired");
    },
    TIMEOUT,
  );

  it(
    "refuses a tool whose policy is deny with a recorded decision and a receipt, the server never seeing it",
    async () => {
      const { ws, store, client } = await setup(
        "guard: { max_repeat_calls: 3 }\ntools:\n  delete_all: { policy: deny }\n",
      );
      const result = await client.callTool({ name: "delete_all", arguments: { path: "/" } });
      expect(result.isError).toBe(true);
      const denied = result.structuredContent as unknown as Decision;
      expect(denied).toMatchObject({
        verdict: "DENY",
        reason: "policy_violation:tool_denied",
        call_number: 1,
      });
      expect(firstText(result)).toContain("this tool is not allowed in this session");
      const checked = await verifyReceipt(denied.receipt as string, ws.publicKeyHex);
      expect(checked.ok && [checked.payload.data.tool_name, checked.payload.data.reason]).toEqual([
        "delete_all",
        "policy_violation:tool_denied",
      ]);
      // No circuit trip: the model goes on with the allowed tools.
      expect(firstText(await client.callTool({ name: "echo", arguments: { text: "ok" } }))).toBe("echo: ok");
      expect(ws.calls().map((c) => c.tool)).toEqual(["echo"]);
      const decisions = (await entries(store)).filter((e) => e.kind === "decision");
      expect(decisions.map((d) => [d.data.tool_name, d.data.verdict, d.data.reason])).toEqual([
        ["delete_all", "DENY", "policy_violation:tool_denied"],
        ["echo", "ALLOW", "within_thresholds"],
      ]);
    },
    TIMEOUT,
  );

  it(
    "asks the user through elicitation on HITL, records the answer as mcp-elicitation:<client>, and runs only what was approved",
    async () => {
      const answers = ["approve", "reject"];
      const { ws, store, client } = await setup("tools:\n  echo: { policy: hitl }\n", {
        name: "desk-agent",
        capabilities: { elicitation: { form: {} } },
        setup: (c) =>
          c.setRequestHandler(ElicitRequestSchema, async (request) => {
            expect(request.params.message).toContain('"echo"');
            return { action: "accept", content: { decision: answers.shift() as string } };
          }),
      });
      const approved = await client.callTool({ name: "echo", arguments: { text: "approved" } });
      expect(approved.isError).toBeFalsy();
      expect(firstText(approved)).toBe("echo: approved");
      const rejected = await client.callTool({ name: "echo", arguments: { text: "rejected" } });
      expect(rejected.isError).toBe(true);
      expect(rejected.structuredContent).toMatchObject({ verdict: "DENY", reason: "hitl_transition:reject" });
      expect(ws.calls().map((c) => c.args)).toEqual([{ text: "approved" }]);
      const chain = await entries(store);
      const answered = chain.filter((e) => e.kind === "hitl_decision");
      expect(answered.map((e) => [e.data.decision, e.data.operator_id])).toEqual([
        ["approve", "mcp-elicitation:desk-agent"],
        ["reject", "mcp-elicitation:desk-agent"],
      ]);
    },
    TIMEOUT,
  );

  it(
    "without elicitation returns the pending request; an operator's approval lets the same call run once",
    async () => {
      // --hitl-timeout 1: where the engine can wait for an operator (waitForHitl), it gives up after a second.
      const { ws, store, client } = await setup("guard: { hitl_mode: always }\n", {
        upstream: ["--hitl-timeout", "1", "--", process.execPath, TEST_SERVER],
      });
      const first = await client.callTool({ name: "echo", arguments: { text: "needs a human" } });
      expect(first.isError).toBe(true);
      const pending = first.structuredContent as unknown as Decision;
      expect(pending).toMatchObject({ verdict: "HITL", reason: "hitl_all_calls" });
      expect(typeof pending.hitl_request_id).toBe("string");
      expect(firstText(first)).toContain(`Request ${pending.hitl_request_id} is pending`);
      expect(ws.calls()).toEqual([]);
      // The operator answers from another process on the same store (as `leash session resume` would).
      const operator = createEngine({ substrate: await store.another(), signer: ws.signer });
      await operator.resume({
        session_id: pending.session_id,
        decision: "approve",
        operator_id: "ops:alice",
        request_id: pending.hitl_request_id as string,
      });
      const again = await client.callTool({ name: "echo", arguments: { text: "needs a human" } });
      expect(firstText(again)).toBe("echo: needs a human");
      expect(ws.calls().map((c) => c.args)).toEqual([{ text: "needs a human" }]);
      const released = (await entries(store)).filter((e) => e.kind === "decision").at(-1);
      expect(released?.data.reason).toBe("hitl_transition:approve");
    },
    TIMEOUT,
  );

  it(
    "without elicitation waits for an operator: approved from another process, the call runs in the same tools/call",
    async () => {
      const { ws, store, client } = await setup("guard: { hitl_mode: always }\n", {
        upstream: ["--hitl-timeout", "60", "--", process.execPath, TEST_SERVER],
      });
      const operator = createEngine({ substrate: await store.another(), signer: ws.signer });
      const answered = (async () => {
        for (;;) {
          const [pending] = await operator.listHitl({ status: "pending" });
          if (pending !== undefined) {
            expect(ws.calls()).toEqual([]); // the upstream has not seen the paused call
            return operator.answerHitl(pending.request_id, { decision: "approve", operatorId: "ops:alice" });
          }
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      })();
      const result = await client.callTool({ name: "echo", arguments: { text: "needs a human" } });
      await answered;
      expect(result.isError).not.toBe(true);
      expect(firstText(result)).toBe("echo: needs a human");
      expect(ws.calls().map((c) => c.args)).toEqual([{ text: "needs a human" }]);
      const decisions = (await entries(store)).filter((e) => e.kind === "decision");
      expect(decisions.map((e) => e.data.reason)).toEqual(["hitl_all_calls", "hitl_transition:approve"]);
    },
    TIMEOUT,
  );

  it(
    "without elicitation, an operator's modify runs the operator's params under the successor nonce",
    async () => {
      const { ws, store, client } = await setup("guard: { hitl_mode: always }\n", {
        upstream: ["--hitl-timeout", "60", "--", process.execPath, TEST_SERVER],
      });
      const operator = createEngine({ substrate: await store.another(), signer: ws.signer });
      const answered = (async () => {
        for (;;) {
          const [pending] = await operator.listHitl({ status: "pending" });
          if (pending !== undefined)
            return operator.answerHitl(pending.request_id, {
              decision: "modify",
              operatorId: "ops:alice",
              params: { text: "edited" },
            });
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      })();
      const result = await client.callTool({ name: "echo", arguments: { text: "draft" } });
      const modified = await answered;
      expect(firstText(result)).toBe("echo: edited");
      expect(ws.calls().map((c) => c.args)).toEqual([{ text: "edited" }]);
      const decisions = (await entries(store)).filter((e) => e.kind === "decision");
      expect(decisions.map((e) => e.data.reason)).toEqual([
        "hitl_all_calls",
        "hitl_transition:modify_successor",
      ]);
      expect(decisions[1]?.data.nonce).toEqual(modified.successor?.nonce);
    },
    TIMEOUT,
  );

  it(
    "gives the client an error, not a hang, when the server crashes, and then exits",
    async () => {
      const { ws, proxy, client } = await setup("guard: {}\n");
      await expect(client.callTool({ name: "crash", arguments: {} })).rejects.toThrow();
      await proxy.closed;
      expect(proxy.stderr()).toContain("the MCP server exited; stopping");
      expect(ws.calls().map((c) => c.tool)).toEqual(["crash"]);
    },
    TIMEOUT,
  );

  it(
    "proxies a streamable HTTP server given with --url",
    async () => {
      const ws = workspace();
      const http = await httpTestServer(ws);
      try {
        const { client } = await setup("guard: {}\n", { upstream: ["--url", http.url] });
        const result = await client.callTool({ name: "echo", arguments: { text: "over http" } });
        expect(firstText(result)).toBe("echo: over http");
        expect(ws.calls().map((c) => c.args)).toEqual([{ text: "over http" }]);
      } finally {
        http.stop();
      }
    },
    TIMEOUT,
  );

  it(
    "stops, with status 0, when the agent closes stdin",
    async () => {
      const ws = workspace();
      const run = await runCli(
        ["--ephemeral-key", "--store", "memory:", "--", process.execPath, TEST_SERVER],
        ws.dir,
      );
      expect(run.stderr).toContain("serving MCP on stdio");
      expect(run.status).toBe(0);
    },
    TIMEOUT,
  );

  it(
    "refuses a bad config or a missing server in one line, starting nothing",
    async () => {
      const ws = workspace();
      const config = ws.writeConfig("tools:\n  echo: { policy: sometimes }\n");
      const bad = await runCli(
        ["--config", config, "--ephemeral-key", "--store", "memory:", "--", "true"],
        ws.dir,
      );
      expect(bad.status).toBe(2);
      expect(bad.stderr.trim().split("\n")).toEqual([
        `leash: error: ${config}: /tools/echo/policy must be one of guard, hitl, deny`,
      ]);
      const none = await runCli(["--ephemeral-key", "--store", "memory:"], ws.dir);
      expect(none.status).toBe(2);
      expect(none.stderr).toContain("leash mcp needs the MCP server to run");
      // A server that cannot start: one line, status 1, and nothing registered in the store.
      const store = await openStore("sqlite", { label: "mcp" });
      stores.push(store);
      const missing = join(ws.dir, "no-such-server");
      const dead = await runCli(
        ["--key-file", ws.keyFile, "--store", store.url as string, "--", missing],
        ws.dir,
      );
      expect(dead.status).toBe(1);
      expect(dead.stderr.trim().split("\n")).toEqual([
        `leash: error: the MCP server did not start: spawn ${missing} ENOENT`,
      ]);
      expect(await entries(store)).toEqual([]);
    },
    TIMEOUT,
  );
});

describe.each(["sqlite", "postgres"] as const)("a budget across calls on %s", (kind) => {
  it(
    "settles the cost the server reports and denies the call the budget cannot cover",
    async () => {
      const { ws, client } = await setup(
        'guard: { budget_usd: 1 }\ntools:\n  paid: { estimate_usd: "0.4" }\n',
        { kind },
      );
      const results = [];
      for (let i = 0; i < 4; i++)
        results.push(await client.callTool({ name: "paid", arguments: { q: `q${i}` } }));
      // Settled at the reported 0.3 (not the 0.4 estimate): three calls fit, the fourth's 0.4 does not.
      expect(results.slice(0, 3).map((r) => r.isError ?? false)).toEqual([false, false, false]);
      expect(results[3]?.structuredContent).toMatchObject({
        verdict: "DENY",
        reason: "budget_overrun",
        budget_remaining_usd: "0.1",
      });
      expect(ws.calls().map((c) => c.args)).toEqual([{ q: "q0" }, { q: "q1" }, { q: "q2" }]);
    },
    TIMEOUT,
  );
});

describe("leash mcp --daemon (through the built CLI, against a real daemon)", () => {
  it(
    "lets the daemon's policy decide: allowed calls run, the repeat limit denies, receipts verify with the daemon's key",
    async () => {
      const ws = workspace();
      const hmacFile = join(ws.dir, "acme-k1.hmac");
      writeFileSync(hmacFile, randomBytes(32).toString("hex"), { mode: 0o600 });
      const daemonKey = generateKeyPair();
      const daemon = await startDaemon({
        config: parseDaemonConfig({
          organizations: {
            acme: {
              hmac_keys: { k1: { file: hmacFile } },
              agents: { "notes-bot": { guard: { max_repeat_calls: 2 } } },
            },
          },
        }),
        signer: daemonKey.signer,
        store: `sqlite:${join(ws.dir, "daemon.db")}`,
        socketPath: join(ws.dir, "leash.sock"),
        logger: pino({ level: "silent" }),
      });
      try {
        const proxy = await proxied(ws, [
          "--daemon",
          daemon.address,
          "--org",
          "acme",
          "--agent",
          "notes-bot",
          "--hmac-key-file",
          hmacFile,
          "--hmac-key-id",
          "k1",
          "--daemon-pubkey",
          daemonKey.publicKeyHex,
          "--daemon-timeout",
          "10000", // a shared 2-core host: SQLite commits can exceed the 50 ms default
          "--",
          process.execPath,
          TEST_SERVER,
        ]);
        open.push(proxy);
        const results = [];
        for (let i = 0; i < 3; i++)
          results.push(await proxy.client.callTool({ name: "echo", arguments: { text: "same" } }));
        expect(results.slice(0, 2).map(firstText)).toEqual(["echo: same", "echo: same"]);
        const denied = results[2]?.structuredContent as unknown as Decision;
        expect(denied).toMatchObject({ verdict: "DENY", reason: "max_repeat_exceeded" });
        const checked = await verifyReceipt(denied.receipt as string, daemonKey.publicKeyHex);
        expect(checked.ok).toBe(true);
        expect(ws.calls()).toHaveLength(2);
      } finally {
        await Promise.allSettled(open.map((p) => p.close()));
        await daemon.close();
      }
    },
    TIMEOUT,
  );
});
