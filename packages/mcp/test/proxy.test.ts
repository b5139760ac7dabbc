// The proxy as a library: @leash/mcp's createLeashProxy with the engine on the memory store, the test MCP
// server as a real stdio child, and the SDK's Client on an in-memory transport pair (stdio is not the point).
import { generateKeyPair } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { createMemorySubstrate } from "@leash/substrate-memory";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, expect, it } from "vitest";
import { createLeashProxy, engineGate, type LeashProxy, upstreamTransport } from "../src/index.js";
import { firstText, TEST_SERVER, workspace } from "./harness.js";

let proxy: LeashProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
});

async function start(config = {}) {
  const ws = workspace();
  const substrate = createMemorySubstrate();
  await substrate.migrate();
  const engine = createEngine({ substrate, signer: generateKeyPair().signer });
  const gate = await engineGate({ engine, agent_id: "lib-test", config });
  const traced: (string | undefined)[] = [];
  proxy = await createLeashProxy({
    upstream: upstreamTransport({
      command: process.execPath,
      args: [TEST_SERVER],
      env: { PATH: process.env.PATH, CALL_LOG: ws.callLog },
    }),
    gate,
    withTraceContext: (traceparent, run) => {
      traced.push(traceparent);
      return run();
    },
  });
  const [agentSide, proxySide] = InMemoryTransport.createLinkedPair();
  await proxy.connect(proxySide);
  const client = new Client({ name: "lib-agent", version: "1.0.0" });
  await client.connect(agentSide);
  return { ws, engine, gate, client, traced };
}

it("runs every tools/call inside the trace-context hook, with the agent's traceparent", async () => {
  const { client, traced } = await start();
  const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  await client.callTool({ name: "echo", arguments: { text: "a" }, _meta: { traceparent } });
  await client.callTool({ name: "echo", arguments: { text: "b" } });
  expect(traced).toEqual([traceparent, undefined]);
}, 30_000);

it("passes progress, log notifications and cancellation through both ways", async () => {
  const { ws, client } = await start();
  const progress: unknown[] = [];
  const logs: unknown[] = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    logs.push(n.params.data);
  });
  const abort = new AbortController();
  const call = client.callTool({ name: "slow", arguments: {} }, undefined, {
    signal: abort.signal,
    onprogress: (p) => {
      progress.push(p);
      abort.abort("the agent gave up");
    },
  });
  await expect(call).rejects.toThrow();
  // The upstream saw the cancellation: its handler's signal was aborted and it logged so.
  // Notifications are not ordered with the server's log file: wait (bounded) for both to arrive.
  const arrived = () => logs.length > 0 && ws.calls().some((c) => c.tool === "slow:cancelled");
  for (let i = 0; i < 100 && !arrived(); i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  expect(ws.calls().map((c) => c.tool)).toEqual(["slow", "slow:cancelled"]);
  expect(progress).toEqual([{ progress: 1, total: 2, message: "half way" }]);
  expect(logs).toEqual(["slow started"]);
}, 30_000);

it("puts a DENY's decision in _meta only for a tool with an outputSchema (its client validates structuredContent)", async () => {
  const { client } = await start({ max_repeat_calls: 1 });
  await client.listTools(); // the client learns the output schemas here, and so does the proxy
  expect((await client.callTool({ name: "stats", arguments: {} })).structuredContent).toEqual({ count: 1 });
  const denied = await client.callTool({ name: "stats", arguments: {} });
  expect(denied.isError).toBe(true);
  expect(firstText(denied)).toContain("max_repeat_exceeded");
  expect(denied.structuredContent).toBeUndefined();
  expect(denied._meta?.["leash/decision"]).toMatchObject({ verdict: "DENY", reason: "max_repeat_exceeded" });
  await client.callTool({ name: "echo", arguments: { text: "x" } }); // any other tool: the circuit is open
  const other = await client.callTool({ name: "echo", arguments: { text: "x" } });
  expect(other.structuredContent).toMatchObject({ verdict: "DENY", reason: "circuit_open" });
}, 30_000);
