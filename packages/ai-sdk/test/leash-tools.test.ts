// The AI SDK's real generateText loop with its own mock model (ai 6's V3, ai 7's V4), tools wrapped by
// leashTools over an engine on a real SQLite file: the repeat guard stops a looping model; HITL is approval.
import { generateKeyPair, verifyChain } from "@leash/chain";
import { LeashToolStopped } from "@leash/core";
import { createEngine, type Engine } from "@leash/engine";
import { openStore, type TestStore } from "@leash/test-stores";
import type { ModelMessage } from "ai";
import * as ai6 from "ai";
import * as ai6Test from "ai/test";
import * as ai7 from "ai7";
import * as ai7Test from "ai7/test";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { leashTools } from "../src/index.js";

const KEY = generateKeyPair();
const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

// ai 7's API used here is ai 6's (its types differ in generics only): both run the same tests.
const SDKS = [
  { sdk: "ai 6", ai: ai6, Mock: ai6Test.MockLanguageModelV3 },
  {
    sdk: "ai 7",
    ai: ai7 as unknown as typeof ai6,
    Mock: (ai7Test as unknown as { MockLanguageModelV4: typeof ai6Test.MockLanguageModelV3 })
      .MockLanguageModelV4,
  },
];
type MockModel = InstanceType<typeof ai6Test.MockLanguageModelV3>;
type Prompt = Parameters<MockModel["doGenerate"]>[0]["prompt"];

/** The tool results the model was shown, oldest first, as the SDK put them in its prompt. */
const toolOutputs = (prompt: Prompt) =>
  prompt.flatMap((m) =>
    m.role === "tool" ? m.content.flatMap((p) => (p.type === "tool-result" ? [p.output] : [])) : [],
  );

/**
 * A model that asks for `toolName` with the same input until it is shown a Leash denial, then stops.
 * ai 6 shows the model the error's message; ai 7 its String() ("LeashToolStopped: Leash denied …").
 */
function loopingModel(Mock: typeof ai6Test.MockLanguageModelV3, toolName: string, input: unknown) {
  let step = 0;
  const model = new Mock({
    doGenerate: async ({ prompt }) => {
      step += 1;
      const denied = toolOutputs(prompt).some(
        (o) => o.type === "error-text" && o.value.includes("Leash denied"),
      );
      return denied
        ? {
            content: [{ type: "text", text: "Stopping: Leash denied the call." }],
            finishReason: { unified: "stop", raw: "stop" },
            usage: USAGE,
            warnings: [],
          }
        : {
            content: [
              { type: "tool-call", toolCallId: `call-${step}`, toolName, input: JSON.stringify(input) },
            ],
            finishReason: { unified: "tool-calls", raw: "tool_calls" },
            usage: USAGE,
            warnings: [],
          };
    },
  });
  return model;
}

async function decisions(store: TestStore) {
  const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 1_000_000));
  const verified = await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] });
  const bodies = entries.map((e) => ({ kind: e.kind, data: JSON.parse(e.body).data }));
  return { verified, bodies };
}

describe.each(SDKS)("leashTools with generateText ($sdk)", ({ ai, Mock }) => {
  const { generateText, stepCountIs, tool } = ai;
  let store: TestStore | undefined;
  let engine: Engine | undefined;
  afterEach(async () => {
    await engine?.close();
    await store?.close();
    store = undefined;
    engine = undefined;
  });
  const setup = async (config: Record<string, unknown>) => {
    store = await openStore("sqlite", { label: "aisdk" });
    engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    const session = await engine.register({ agent_id: "ai-sdk-bot", config });
    return { engine, sessionId: session.session_id };
  };

  it("runs the tool until the repeat guard denies it; the model reads the denial as a tool error", async () => {
    const { engine, sessionId } = await setup({ max_repeat_calls: 3, budget_usd: 1 });
    const ran: string[] = [];
    const tools = leashTools(
      {
        search: tool({
          description: "Search the web",
          inputSchema: z.object({ q: z.string() }),
          execute: async ({ q }) => {
            ran.push(q);
            return { hits: 0 };
          },
        }),
      },
      engine,
      { session_id: sessionId, estimate: "0.10", cost: () => "0.05" },
    );
    const model = loopingModel(Mock, "search", { q: "pricing" });
    const result = await generateText({ model, tools, prompt: "find the pricing", stopWhen: stepCountIs(8) });

    expect(ran).toEqual(["pricing", "pricing", "pricing"]);
    // Step 4's call was denied: the SDK's own tool-error part, carrying Leash's error.
    const errors = result.steps.flatMap((s) => s.content.filter((p) => p.type === "tool-error"));
    expect(errors).toHaveLength(1);
    expect(LeashToolStopped.isInstance(errors[0]?.error)).toBe(true);
    expect((errors[0]!.error as LeashToolStopped).reason).toBe("max_repeat_exceeded");
    // What the model was shown on its 5th turn: three results, then the denial as error text.
    const shown = toolOutputs(model.doGenerateCalls[4]?.prompt ?? []);
    expect(shown.map((o) => o.type)).toEqual(["json", "json", "json", "error-text"]);
    expect(shown[3]).toMatchObject({ value: expect.stringContaining("(max_repeat_exceeded)") });
    expect(result.text).toBe("Stopping: Leash denied the call.");
    expect(result.steps).toHaveLength(5);

    const { verified, bodies } = await decisions(store!);
    expect(verified.ok).toBe(true);
    const made = bodies.filter((b) => b.kind === "decision").map((b) => [b.data.tool_name, b.data.reason]);
    expect(made).toEqual([
      ["search", "within_thresholds"],
      ["search", "within_thresholds"],
      ["search", "within_thresholds"],
      ["search", "max_repeat_exceeded"],
    ]);
    // Every ALLOW was held at the estimate and settled at the tool's actual cost after it ran.
    const settled = bodies
      .filter((b) => b.kind === "post_exec")
      .map((b) => [b.data.estimated_usd, b.data.actual_usd]);
    expect(settled).toEqual([
      ["0.1", "0.05"],
      ["0.1", "0.05"],
      ["0.1", "0.05"],
    ]);
    const after = await engine.getSession(sessionId);
    expect([after.call_count, after.budget_remaining_usd]).toEqual([4, "0.85"]);
  });

  it("HITL is the SDK's tool approval: the step stops, an approval response releases the exact call", async () => {
    const { engine, sessionId } = await setup({ hitl_mode: "always" });
    const sent: string[] = [];
    const tools = leashTools(
      {
        send_email: tool({
          inputSchema: z.object({ to: z.string() }),
          execute: async ({ to }) => {
            sent.push(to);
            return "sent";
          },
        }),
      },
      engine,
      { session_id: sessionId, approver: "alice@example.com" },
    );
    const model = loopingModel(Mock, "send_email", { to: "bob@example.com" });
    const first = await generateText({ model, tools, prompt: "mail bob", stopWhen: stepCountIs(3) });
    expect(sent).toEqual([]);
    const requests = first.content.filter((p) => p.type === "tool-approval-request");
    expect(requests).toHaveLength(1);
    const pending = await engine.getSession(sessionId);
    expect(pending.status).toBe("PAUSED");

    const messages: ModelMessage[] = [
      { role: "user", content: "mail bob" },
      ...first.response.messages,
      {
        role: "tool",
        content: [{ type: "tool-approval-response", approvalId: requests[0]!.approvalId, approved: true }],
      },
    ];
    const doneModel = new Mock({
      doGenerate: {
        content: [{ type: "text", text: "Mail sent." }],
        finishReason: { unified: "stop", raw: "stop" },
        usage: USAGE,
        warnings: [],
      },
    });
    const second = await generateText({ model: doneModel, tools, messages });
    expect(sent).toEqual(["bob@example.com"]);
    expect(second.text).toBe("Mail sent.");
    // The model was shown the tool's real result, released by the approval.
    expect(toolOutputs(doneModel.doGenerateCalls[0]!.prompt)).toEqual([{ type: "text", value: "sent" }]);

    const { verified, bodies } = await decisions(store!);
    expect(verified.ok).toBe(true);
    const trail = bodies
      .filter((b) => b.kind === "decision" || b.kind === "hitl_decision")
      .map((b) => [b.kind, b.data.reason ?? b.data.decision, b.data.operator_id ?? null]);
    expect(trail).toEqual([
      ["decision", "hitl_all_calls", null],
      ["hitl_decision", "approve", "alice@example.com"],
      ["decision", "hitl_transition:approve", null],
    ]);
  });

  it('with hitl: "error" a paused call is a tool error the model reads, and nothing waits', async () => {
    const { engine, sessionId } = await setup({ hitl_mode: "always" });
    let runs = 0;
    const tools = leashTools(
      {
        deploy: tool({
          inputSchema: z.object({ env: z.string() }),
          execute: async () => {
            runs += 1;
            return "ok";
          },
        }),
      },
      engine,
      { session_id: sessionId, hitl: "error" },
    );
    const model = loopingModel(Mock, "deploy", { env: "prod" });
    const result = await generateText({ model, tools, prompt: "deploy", stopWhen: stepCountIs(1) });
    expect(runs).toBe(0);
    const errors = result.steps.flatMap((s) => s.content.filter((p) => p.type === "tool-error"));
    expect(errors).toHaveLength(1);
    const stopped = errors[0]!.error as LeashToolStopped;
    expect([stopped.verdict, stopped.reason, stopped.code]).toEqual([
      "HITL",
      "hitl_all_calls",
      "hitl_required",
    ]);
    expect(stopped.requestId).toMatch(/./);
    expect(stopped.message).toContain(`Request ${stopped.requestId} waits for a human's decision`);
  });
});
