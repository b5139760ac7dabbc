// leashTools over @leash/client against a real `leash serve` process (Unix socket, SQLite file): the same
// looping model is stopped by the daemon's policy, and the daemon's chain has every decision and verifies.
import { type Client, createClient } from "@leash/client";
import { type ServeFixture, startServeFixture } from "@leash/test-stores";
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { afterEach, beforeEach, expect, it } from "vitest";
import { z } from "zod";
import { leashTools } from "../src/index.js";

const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};
let daemon: ServeFixture | undefined;
let client: Client | undefined;

beforeEach(async () => {
  daemon = await startServeFixture({
    agents: { "ai-sdk-bot": { guard: { budget_usd: 1, max_repeat_calls: 3 } } },
  });
}, 60_000);

afterEach(async () => {
  client?.close();
  client = undefined;
  await daemon?.remove();
  daemon = undefined;
});

it("over the daemon: three runs, then the daemon's DENY is the tool error the model reads", async () => {
  client = createClient({
    socketPath: daemon!.socketPath,
    organizationId: daemon!.organizationId,
    agentId: "ai-sdk-bot",
    hmacKey: daemon!.hmacKey,
    keyId: daemon!.keyId,
    daemonPublicKey: daemon!.publicKeyHex, // every receipt verified before the tool runs
    // SQLite commits (fsync) on a shared host can take far longer than the 50 ms default.
    timeoutMs: 5000,
    controlTimeoutMs: 5000,
    heartbeatIntervalMs: 0,
  });
  const { session_id } = await client.register({ framework: "ai-sdk" });
  const ran: string[] = [];
  const tools = leashTools(
    {
      search: tool({
        inputSchema: z.object({ q: z.string() }),
        execute: async ({ q }) => {
          ran.push(q);
          return "nothing";
        },
      }),
    },
    client,
    { session_id, estimate: "0.1" },
  );
  let step = 0;
  const model = new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      step += 1;
      const denied = prompt.some(
        (m) =>
          m.role === "tool" &&
          m.content.some((p) => p.type === "tool-result" && p.output.type === "error-text"),
      );
      return denied
        ? {
            content: [{ type: "text", text: "giving up" }],
            finishReason: { unified: "stop", raw: "stop" },
            usage: USAGE,
            warnings: [],
          }
        : {
            content: [{ type: "tool-call", toolCallId: `c${step}`, toolName: "search", input: '{"q":"x"}' }],
            finishReason: { unified: "tool-calls", raw: "tool_calls" },
            usage: USAGE,
            warnings: [],
          };
    },
  });
  const result = await generateText({ model, tools, prompt: "search", stopWhen: stepCountIs(8) });
  expect(ran).toEqual(["x", "x", "x"]);
  expect(result.text).toBe("giving up");
  const errors = result.steps.flatMap((s) => s.content.filter((p) => p.type === "tool-error"));
  expect(errors.map((e) => (e.error as { reason: string }).reason)).toEqual(["max_repeat_exceeded"]);

  // The daemon's own chain, checked by `leash verify` and read by `leash export` once it stopped.
  client.close();
  client = undefined;
  await daemon!.stop();
  const verified = await daemon!.verify();
  expect(verified.stdout).toMatch(/^OK: \d+ entries verified/);
  expect(verified.code).toBe(0);
  const entries = await daemon!.entries();
  expect(entries.filter((e) => e.kind === "decision").map((e) => e.data.reason)).toEqual([
    "within_thresholds",
    "within_thresholds",
    "within_thresholds",
    "max_repeat_exceeded",
  ]);
  expect(entries.filter((e) => e.kind === "post_exec").map((e) => e.data.actual_usd)).toEqual([
    "0.1",
    "0.1",
    "0.1",
  ]);
}, 60_000);
