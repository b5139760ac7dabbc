// LangChain v1's real createAgent loop over a real `leash serve` process (SQLite file), reached through
// @leash/client on the Unix socket and on gRPC: the daemon's policy stops the looping model, its chain says so.
import { AIMessage, type BaseMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import { tool } from "@langchain/core/tools";
import { type Client, createClient } from "@leash/client";
import { type ServeFixture, startServeFixture } from "@leash/test-stores";
import { createAgent } from "langchain";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { leashMiddleware } from "../src/index.js";

const isDenial = (m: BaseMessage | undefined) =>
  m instanceof ToolMessage && typeof m.content === "string" && m.content.startsWith("Leash denied");

/** A model that asks for search {"q":"pricing"} until it reads a Leash denial, then answers. */
function loopingModel(turns: number) {
  const model = fakeModel();
  for (let turn = 1; turn <= turns; turn++) {
    model.respond((messages) =>
      isDenial(messages.at(-1))
        ? new AIMessage("Stopping: Leash denied the search.")
        : new AIMessage({
            content: "",
            tool_calls: [{ name: "search", args: { q: "pricing" }, id: `call-${turn}`, type: "tool_call" }],
          }),
    );
  }
  return model;
}

describe.each(["socket", "grpc"] as const)(
  "leashMiddleware over a `leash serve` daemon (%s)",
  (transport) => {
    let daemon: ServeFixture | undefined;
    let client: Client | undefined;
    afterEach(async () => {
      client?.close();
      client = undefined;
      await daemon?.remove();
      daemon = undefined;
    });

    it("the tool runs until the daemon denies the repeat; the model reads a ToolMessage; the chain verifies", async () => {
      daemon = await startServeFixture({
        agents: { "langchain-bot": { guard: { budget_usd: 1, max_repeat_calls: 3 } } },
        grpc: transport === "grpc",
      });
      // Moving the agent from library mode to the daemon is this: a client instead of an engine.
      client = createClient({
        ...(transport === "socket"
          ? { socketPath: daemon.socketPath, hmacKey: daemon.hmacKey, keyId: daemon.keyId }
          : { grpc: { address: daemon.grpcAddress!, tls: false } }),
        organizationId: daemon.organizationId,
        agentId: "langchain-bot",
        daemonPublicKey: daemon.publicKeyHex, // every receipt verified before the tool runs
        // SQLite commits (fsync) on a shared host can take far longer than the 50 ms default.
        timeoutMs: 5000,
        controlTimeoutMs: 5000,
        heartbeatIntervalMs: 0,
      });
      const { session_id } = await client.register({ framework: "langchain" });
      const ran: string[] = [];
      const search = tool(
        async ({ q }: { q: string }) => {
          ran.push(q);
          return "no results";
        },
        { name: "search", description: "Search the web", schema: z.object({ q: z.string() }) },
      );
      const model = loopingModel(6);
      const agent = createAgent({
        model,
        tools: [search],
        middleware: [leashMiddleware(client, { session_id, estimate: "0.02" })],
      });
      const result = await agent.invoke({ messages: [new HumanMessage("find the pricing")] });

      expect(ran).toEqual(["pricing", "pricing", "pricing"]);
      const seen = model.calls[4]?.messages ?? [];
      const tools = seen.filter((m): m is ToolMessage => m instanceof ToolMessage);
      expect(tools.map((m) => [m.status ?? "success", m.tool_call_id])).toEqual([
        ["success", "call-1"],
        ["success", "call-2"],
        ["success", "call-3"],
        ["error", "call-4"],
      ]);
      expect(tools[3]?.content).toContain("(max_repeat_exceeded)");
      expect(tools[3]?.artifact).toMatchObject({
        leash: {
          verdict: "DENY",
          reason: "max_repeat_exceeded",
          receipt: expect.any(String),
          request_id: null,
        },
      });
      expect(result.messages.at(-1)?.content).toBe("Stopping: Leash denied the search.");

      // The daemon's own chain, checked by `leash verify` and read by `leash export` once it stopped.
      client.close();
      client = undefined;
      await daemon.stop();
      const verified = await daemon.verify();
      expect(verified.stdout).toMatch(/^OK: \d+ entries verified/);
      expect(verified.code).toBe(0);
      const entries = await daemon.entries();
      expect(entries.filter((e) => e.kind === "decision").map((e) => e.data.reason)).toEqual([
        "within_thresholds",
        "within_thresholds",
        "within_thresholds",
        "max_repeat_exceeded",
      ]);
      expect(entries.filter((e) => e.kind === "post_exec").map((e) => e.data.actual_usd)).toEqual([
        "0.02",
        "0.02",
        "0.02",
      ]);
    }, 60_000);
  },
);
