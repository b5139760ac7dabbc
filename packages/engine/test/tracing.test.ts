// OpenTelemetry spans of evaluate, postExec and resume, collected by the SDK's real in-memory exporter
// on every real store; the W3C traceparent a caller passes becomes the span's parent.
import { generateKeyPair } from "@leash/chain";
import { propagation, SpanStatusCode, trace } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createEngine, LeashError } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();
const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN = "00f067aa0ba902b7";

beforeAll(() => {
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});
afterAll(() => {
  propagation.disable();
  trace.disable();
});

function collector() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { exporter, provider, tracer: provider.getTracer("test") };
}

const named = (spans: readonly ReadableSpan[], name: string) => spans.filter((s) => s.name === name);

describe.each(KINDS)("spans on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it("evaluate: one span per call with the GenAI and leash.* attributes, under the caller's traceparent", async () => {
    store = await openStore(kind);
    const { exporter, tracer } = collector();
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, tracer });
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1, max_repeat_calls: 1 } });
    const allowed = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "search",
      params: { q: "a" },
      nonce: "n-1",
      estimated_cost_usd: "0.25",
      traceparent: `00-${TRACE_ID}-${PARENT_SPAN}-01`,
    });
    const denied = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "search",
      params: { q: "a" },
      nonce: "n-2",
      estimated_cost_usd: "0.25",
      call_id: "toolu_42",
    });
    expect([allowed.verdict, denied.verdict, denied.reason]).toEqual([
      "ALLOW",
      "DENY",
      "max_repeat_exceeded",
    ]);

    const spans = named(exporter.getFinishedSpans(), "leash.evaluate search");
    expect(spans).toHaveLength(2);
    const [first, second] = spans as [ReadableSpan, ReadableSpan];
    expect(first.attributes).toEqual({
      "gen_ai.operation.name": "execute_tool",
      "gen_ai.tool.name": "search",
      "gen_ai.tool.call.id": "n-1",
      "leash.session_id": s.session_id,
      "leash.verdict": "ALLOW",
      "leash.reason": allowed.reason,
      "leash.call_number": 1,
      "leash.budget_remaining_usd": 0.75,
      "leash.chain.seq": allowed.entry_seq,
    });
    expect(first.spanContext().traceId).toBe(TRACE_ID);
    expect(first.parentSpanContext?.spanId).toBe(PARENT_SPAN);
    // A DENY is an answer, not an error; the caller's call id wins over the nonce.
    expect(second.attributes["leash.verdict"]).toBe("DENY");
    expect(second.attributes["leash.reason"]).toBe("max_repeat_exceeded");
    expect(second.attributes["gen_ai.tool.call.id"]).toBe("toolu_42");
    expect(second.attributes["leash.chain.seq"]).toBe(denied.entry_seq);
    expect(second.status.code).toBe(SpanStatusCode.UNSET);
    expect(second.spanContext().traceId).not.toBe(TRACE_ID);
  });

  it("postExec and resume: their own spans, and a refused settlement is recorded as an error", async () => {
    store = await openStore(kind);
    const { exporter, tracer } = collector();
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, tracer });
    const s = await engine.register({
      agent_id: "bot",
      config: { budget_usd: 1, hitl_mode: "on_threshold", hitl_budget_threshold: 0.8 },
    });
    const call = (nonce: string) =>
      engine.evaluate({
        session_id: s.session_id,
        tool_name: "pay",
        params: { to: "x" },
        nonce,
        estimated_cost_usd: 0.3,
      });
    const first = await call("p-1");
    const settled = await engine.postExec({
      session_id: s.session_id,
      call_number: first.call_number,
      actual_cost_usd: 0.3,
      call_id: "call-1",
    });
    const paused = await call("p-2");
    expect(paused.verdict).toBe("HITL");
    await engine.resume({ session_id: s.session_id, decision: "approve", operator_id: "alice" });
    await expect(
      engine.postExec({ session_id: s.session_id, call_number: 99, actual_cost_usd: 0.1 }),
    ).rejects.toThrow(LeashError);

    const spans = exporter.getFinishedSpans();
    const posts = named(spans, "leash.post_exec");
    expect(posts).toHaveLength(2);
    const [ok, refused] = posts as [ReadableSpan, ReadableSpan];
    expect(ok.attributes).toMatchObject({
      "gen_ai.operation.name": "execute_tool",
      "gen_ai.tool.call.id": "call-1",
      "leash.session_id": s.session_id,
      "leash.call_number": 1,
      "leash.budget_remaining_usd": Number(settled.budget_remaining_usd),
      "leash.actual_usd": 0.3,
      "leash.replayed": false,
    });
    expect(ok.attributes["leash.chain.seq"]).toBe(first.entry_seq! + 1);
    expect(ok.status.code).toBe(SpanStatusCode.UNSET);
    expect(refused.status.code).toBe(SpanStatusCode.ERROR);
    expect(refused.attributes["error.type"]).toBe("reservation_not_found");
    expect(refused.events.map((e) => e.name)).toEqual(["exception"]);

    const [decision] = named(spans, "leash.hitl_decision");
    expect(decision?.attributes).toMatchObject({
      "gen_ai.tool.name": "pay",
      "gen_ai.tool.call.id": "p-2",
      "leash.hitl.decision": "approve",
      "leash.call_number": paused.call_number,
      "leash.chain.seq": paused.entry_seq! + 2, // after the paused call's hitl_request entry
      "leash.session_status": "ACTIVE",
    });
  });
});

describe("the global tracer provider", () => {
  it("is used when no tracer is given, and nothing is recorded once it is gone", async () => {
    const store = await openStore("memory");
    try {
      const { exporter, provider } = collector();
      trace.setGlobalTracerProvider(provider);
      const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
      const s = await engine.register({ agent_id: "bot", config: {} });
      await engine.evaluate({ session_id: s.session_id, tool_name: "t", nonce: 1 });
      expect(exporter.getFinishedSpans().map((span) => span.name)).toEqual(["leash.evaluate t"]);
      expect(exporter.getFinishedSpans()[0]?.instrumentationScope.name).toBe("@leash/engine");
      trace.disable(); // back to the API's no-op
      const after = createEngine({ substrate: store.substrate, signer: KEY.signer });
      const verdict = await after.evaluate({ session_id: s.session_id, tool_name: "t", nonce: 2 });
      expect(verdict.verdict).toBe("ALLOW");
      expect(exporter.getFinishedSpans()).toHaveLength(1);
    } finally {
      await store.close();
    }
  });
});
