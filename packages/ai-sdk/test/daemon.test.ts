// leashTools over @leash/client against the real daemon (in this process, a real Unix socket, a real
// SQLite file): the same looping model is stopped by the daemon's policy, and its chain has every decision.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateKeyPair, verifyChain } from "@leash/chain";
import { type Client, createClient } from "@leash/client";
import { type Daemon, parseDaemonConfig, startDaemon } from "@leash/daemon";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { pino } from "pino";
import { afterEach, beforeEach, expect, it } from "vitest";
import { z } from "zod";
import { leashTools } from "../src/index.js";

const HMAC = randomBytes(32);
const KEY = generateKeyPair();
const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};
let dir: string;
let daemon: Daemon | undefined;
let client: Client | undefined;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), "leash-aisdk-daemon-"));
  writeFileSync(join(dir, "acme-k1.hmac"), HMAC.toString("hex"), { mode: 0o600 });
  daemon = await startDaemon({
    config: parseDaemonConfig({
      organizations: {
        acme: {
          hmac_keys: { k1: { file: join(dir, "acme-k1.hmac") } },
          agents: { "ai-sdk-bot": { guard: { budget_usd: 1, max_repeat_calls: 3 } } },
        },
      },
    }),
    signer: KEY.signer,
    store: `sqlite:${join(dir, "leash.db")}`,
    socketPath: join(dir, "leash.sock"),
    logger: pino({ level: "silent" }),
  });
});

afterEach(async () => {
  client?.close();
  client = undefined;
  await daemon?.close();
  daemon = undefined;
  rmSync(dir, { recursive: true, force: true });
});

it("over the daemon: three runs, then the daemon's DENY is the tool error the model reads", async () => {
  client = createClient({
    socketPath: daemon!.address,
    organizationId: "acme",
    agentId: "ai-sdk-bot",
    hmacKey: HMAC,
    keyId: "k1",
    daemonPublicKey: KEY.signer.publicKeyHex, // every receipt verified before the tool runs
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

  // The daemon's own chain, read from its SQLite file after it stopped.
  client.close();
  client = undefined;
  await daemon!.close();
  daemon = undefined;
  const substrate = await openSqliteSubstrate({ path: join(dir, "leash.db") });
  try {
    const entries = await substrate.transaction((tx) => tx.chain.range(0, 1_000_000));
    expect((await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] })).ok).toBe(true);
    const decisions = entries.filter((e) => e.kind === "decision").map((e) => JSON.parse(e.body).data.reason);
    expect(decisions).toEqual([
      "within_thresholds",
      "within_thresholds",
      "within_thresholds",
      "max_repeat_exceeded",
    ]);
    expect(entries.filter((e) => e.kind === "post_exec")).toHaveLength(3);
  } finally {
    await substrate.close();
  }
});
