// The proxy as a library: @leash/mcp's createLeashProxy with the engine on the memory store, the test MCP
// server as a real stdio child, and the SDK's Client on an in-memory transport pair (stdio is not the point).
import { generateKeyPair } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { createMemorySubstrate } from "@leash/substrate-memory";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import { propagation } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { afterEach, expect, it } from "vitest";
import {
  createLeashProxy,
  engineGate,
  type LeashProxy,
  McpProxyError,
  upstreamTransport,
} from "../src/index.js";
import { firstText, TEST_SERVER, workspace } from "./harness.js";

let proxy: LeashProxy | undefined;
afterEach(async () => {
  await proxy?.close();
  proxy = undefined;
});

async function start(config = {}, tracing: { exporter?: InMemorySpanExporter } = {}) {
  const ws = workspace();
  const substrate = createMemorySubstrate();
  await substrate.migrate();
  const tracer =
    tracing.exporter &&
    new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(tracing.exporter)] }).getTracer(
      "test",
    );
  const engine = createEngine({ substrate, signer: generateKeyPair().signer, ...(tracer ? { tracer } : {}) });
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

it("makes the engine's spans of a call children of the agent's traceparent", async () => {
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  try {
    const exporter = new InMemorySpanExporter();
    const { client } = await start({}, { exporter });
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    await client.callTool({
      name: "echo",
      arguments: { text: "a" },
      _meta: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
    });
    await client.callTool({ name: "echo", arguments: { text: "b" } });
    const spans = exporter.getFinishedSpans();
    const evaluates = spans.filter((s) => s.name.startsWith("leash.evaluate"));
    const settles = spans.filter((s) => s.name === "leash.post_exec");
    expect(evaluates).toHaveLength(2);
    expect(settles).toHaveLength(2);
    expect(evaluates[0]?.spanContext().traceId).toBe(traceId);
    expect(evaluates[0]?.parentSpanContext?.spanId).toBe("00f067aa0ba902b7");
    expect(settles[0]?.spanContext().traceId).toBe(traceId);
    expect(evaluates[1]?.spanContext().traceId).not.toBe(traceId);
  } finally {
    propagation.disable();
  }
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

it("refuses a tool's deny policy that the gate's guard does not list in denied_tools, before the server starts", async () => {
  const ws = workspace();
  const substrate = createMemorySubstrate();
  await substrate.migrate();
  const engine = createEngine({ substrate, signer: generateKeyPair().signer });
  const unlisted = await engineGate({ engine, agent_id: "lib-test", config: {} });
  const upstream = () =>
    upstreamTransport({ command: process.execPath, args: [TEST_SERVER], env: { CALL_LOG: ws.callLog } });
  await expect(
    createLeashProxy({ upstream: upstream(), gate: unlisted, tools: { delete_all: { policy: "deny" } } }),
  ).rejects.toSatisfy(
    (error) => McpProxyError.isInstance(error) && /denied_tools/.test((error as Error).message),
  );
  // Listed: the engine refuses the call with a recorded decision.
  const listed = await engineGate({ engine, agent_id: "lib-test", config: { denied_tools: ["delete_all"] } });
  proxy = await createLeashProxy({
    upstream: upstream(),
    gate: listed,
    tools: { delete_all: { policy: "deny" } },
  });
  const [agentSide, proxySide] = InMemoryTransport.createLinkedPair();
  await proxy.connect(proxySide);
  const client = new Client({ name: "lib-agent", version: "1.0.0" });
  await client.connect(agentSide);
  const result = await client.callTool({ name: "delete_all", arguments: {} });
  expect(result.structuredContent).toMatchObject({ verdict: "DENY", reason: "policy_violation:tool_denied" });
  expect(ws.calls()).toEqual([]);
});
