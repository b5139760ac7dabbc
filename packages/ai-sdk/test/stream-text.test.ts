// leashTools under streamText (the streaming tool loop), with the SDK's mock model streaming a tool call
// per step: the same repeat-guard stop as generateText, seen as a tool-error part in the full stream.
import { generateKeyPair } from "@leash/chain";
import { createEngine, type Engine } from "@leash/engine";
import { openStore, type TestStore } from "@leash/test-stores";
import { simulateReadableStream, stepCountIs, streamText, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { afterEach, expect, it } from "vitest";
import { z } from "zod";
import { leashTools } from "../src/index.js";

const KEY = generateKeyPair();
const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};
let store: TestStore | undefined;
let engine: Engine | undefined;

afterEach(async () => {
  await engine?.close();
  await store?.close();
});

it("streamText: three streamed calls run, the fourth is a tool-error part with Leash's reason", async () => {
  store = await openStore("sqlite", { label: "aisdkstream" });
  engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
  const { session_id } = await engine.register({ agent_id: "streamer", config: { max_repeat_calls: 3 } });
  let runs = 0;
  const tools = leashTools(
    {
      search: tool({
        inputSchema: z.object({ q: z.string() }),
        execute: async () => {
          runs += 1;
          return "nothing";
        },
      }),
    },
    engine,
    { session_id },
  );
  let step = 0;
  const model = new MockLanguageModelV3({
    doStream: async ({ prompt }) => {
      step += 1;
      const denied = prompt.some(
        (m) =>
          m.role === "tool" &&
          m.content.some((p) => p.type === "tool-result" && p.output.type === "error-text"),
      );
      const finish = (unified: "stop" | "tool-calls") =>
        ({ type: "finish", finishReason: { unified, raw: unified }, usage: USAGE }) as const;
      return {
        stream: simulateReadableStream({
          chunks: denied
            ? [
                { type: "stream-start", warnings: [] },
                { type: "text-start", id: "t" },
                { type: "text-delta", id: "t", delta: "giving up" },
                { type: "text-end", id: "t" },
                finish("stop"),
              ]
            : [
                { type: "stream-start", warnings: [] },
                { type: "tool-call", toolCallId: `s${step}`, toolName: "search", input: '{"q":"x"}' },
                finish("tool-calls"),
              ],
        }),
      };
    },
  });
  const result = streamText({ model, tools, prompt: "search", stopWhen: stepCountIs(8) });
  const errors: { toolCallId: string; reason: string }[] = [];
  for await (const part of result.fullStream) {
    if (part.type === "tool-error") {
      errors.push({ toolCallId: part.toolCallId, reason: (part.error as { reason: string }).reason });
    }
  }
  expect(runs).toBe(3);
  expect(errors).toEqual([{ toolCallId: "s4", reason: "max_repeat_exceeded" }]);
  expect(await result.text).toBe("giving up");
  expect((await engine.getSession(session_id)).call_count).toBe(4);
});
