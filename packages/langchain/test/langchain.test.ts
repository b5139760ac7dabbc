// LangChain v1's real createAgent loop with @langchain/core's fakeModel asking for the same tool again and
// again, decided by Leash over an engine on a real SQLite file: the middleware and the single-tool wrapper.

import { AIMessage, type BaseMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import { tool } from "@langchain/core/tools";
import { generateKeyPair, verifyChain } from "@leash/chain";
import { createEngine, type Engine } from "@leash/engine";
import { openStore, type TestStore } from "@leash/test-stores";
import { createAgent } from "langchain";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { leashMiddleware, leashTool } from "../src/index.js";

const KEY = generateKeyPair();

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

function searchTool(ran: string[]) {
  return tool(
    async ({ q }: { q: string }) => {
      ran.push(q);
      return "no results";
    },
    { name: "search", description: "Search the web", schema: z.object({ q: z.string() }) },
  );
}

describe("Leash in a LangChain agent", () => {
  let store: TestStore | undefined;
  let engine: Engine | undefined;
  afterEach(async () => {
    await engine?.close();
    await store?.close();
    store = undefined;
    engine = undefined;
  });
  const setup = async () => {
    store = await openStore("sqlite", { label: "langchain" });
    engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    const session = await engine.register({
      agent_id: "langchain-bot",
      config: { max_repeat_calls: 3, budget_usd: 1 },
    });
    return { engine, sessionId: session.session_id };
  };

  async function expectStoppedAtFourth(
    model: ReturnType<typeof fakeModel>,
    messages: BaseMessage[],
    ran: string[],
  ) {
    expect(ran).toEqual(["pricing", "pricing", "pricing"]);
    // The model's 5th turn saw three results and then the denial, as a ToolMessage with status "error".
    const seen = model.calls[4]?.messages ?? [];
    const tools = seen.filter((m): m is ToolMessage => m instanceof ToolMessage);
    expect(tools.map((m) => [m.status ?? "success", m.tool_call_id])).toEqual([
      ["success", "call-1"],
      ["success", "call-2"],
      ["success", "call-3"],
      ["error", "call-4"],
    ]);
    expect(tools[3]?.content).toContain("(max_repeat_exceeded)");
    expect(tools[3]?.artifact).toMatchObject({ leash: { verdict: "DENY", reason: "max_repeat_exceeded" } });
    expect(messages.at(-1)?.content).toBe("Stopping: Leash denied the search.");

    const entries = await store!.substrate.transaction((tx) => tx.chain.range(0, 1_000_000));
    expect((await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] })).ok).toBe(true);
    const bodies = entries.map((e) => ({ kind: e.kind, data: JSON.parse(e.body).data }));
    expect(bodies.filter((b) => b.kind === "decision").map((b) => b.data.reason)).toEqual([
      "within_thresholds",
      "within_thresholds",
      "within_thresholds",
      "max_repeat_exceeded",
    ]);
    expect(bodies.filter((b) => b.kind === "post_exec").map((b) => b.data.actual_usd)).toEqual([
      "0.02",
      "0.02",
      "0.02",
    ]);
  }

  it("leashMiddleware: the tool runs until the repeat guard denies it; the model reads a ToolMessage", async () => {
    const { engine, sessionId } = await setup();
    const ran: string[] = [];
    const model = loopingModel(6);
    const agent = createAgent({
      model,
      tools: [searchTool(ran)],
      middleware: [leashMiddleware(engine, { session_id: sessionId, estimate: "0.02" })],
    });
    const result = await agent.invoke({ messages: [new HumanMessage("find the pricing")] });
    await expectStoppedAtFourth(model, result.messages, ran);
  });

  it("leashTool: one wrapped tool in a plain agent behaves the same", async () => {
    const { engine, sessionId } = await setup();
    const ran: string[] = [];
    const model = loopingModel(6);
    const agent = createAgent({
      model,
      tools: [leashTool(searchTool(ran), engine, { session_id: sessionId, estimate: 0.02 })],
    });
    const result = await agent.invoke({ messages: [new HumanMessage("find the pricing")] });
    await expectStoppedAtFourth(model, result.messages, ran);
  });

  it("leashTool called directly (no tool call) throws LeashToolStopped instead of running", async () => {
    const { engine, sessionId } = await setup();
    const ran: string[] = [];
    const wrapped = leashTool(searchTool(ran), engine, { session_id: sessionId, estimate: 0.02 });
    for (let i = 0; i < 3; i++) expect(await wrapped.invoke({ q: "pricing" })).toBe("no results");
    await expect(wrapped.invoke({ q: "pricing" })).rejects.toMatchObject({
      name: "LeashToolStopped",
      code: "denied",
      reason: "max_repeat_exceeded",
    });
    expect(ran).toHaveLength(3);
  });
  it("HITL: the model is told the call waits; after an operator approves in Leash, the same call runs", async () => {
    store = await openStore("sqlite", { label: "langchain" });
    engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    const { session_id } = await engine.register({ agent_id: "mailer", config: { hitl_mode: "always" } });
    const sent: string[] = [];
    const sendEmail = tool(
      async ({ to }: { to: string }) => {
        sent.push(to);
        return "sent";
      },
      { name: "send_email", description: "Send an email", schema: z.object({ to: z.string() }) },
    );
    const call = (id: string) =>
      new AIMessage({
        content: "",
        tool_calls: [{ name: "send_email", args: { to: "bob@example.com" }, id, type: "tool_call" }],
      });
    const model = fakeModel()
      .respond(call("call-1"))
      .respond(new AIMessage("Waiting for a human to approve the email."))
      .respond(call("call-2"))
      .respond(new AIMessage("Mail sent."));
    const agent = createAgent({
      model,
      tools: [sendEmail],
      middleware: [leashMiddleware(engine, { session_id })],
    });
    const first = await agent.invoke({ messages: [new HumanMessage("mail bob")] });
    expect(sent).toEqual([]);
    const pausedMessage = first.messages.find((m): m is ToolMessage => m instanceof ToolMessage);
    const requestId = (pausedMessage!.artifact as { leash: { request_id: string } }).leash.request_id;
    expect(pausedMessage?.content).toBe(
      `Leash paused send_email: every call in this session needs a human's approval (hitl_all_calls); ` +
        `the tool did not run. Request ${requestId} waits for a human's decision.`,
    );

    // The operator answers in Leash (as `leash session resume` does); the model then asks again.
    await engine.resume({ session_id, decision: "approve", operator_id: "alice", request_id: requestId });
    const second = await agent.invoke({
      messages: [...first.messages, new HumanMessage("approved, go ahead")],
    });
    expect(sent).toEqual(["bob@example.com"]);
    expect(second.messages.at(-1)?.content).toBe("Mail sent.");

    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 1_000_000));
    const trail = entries
      .map((e) => ({ kind: e.kind, data: JSON.parse(e.body).data }))
      .filter((b) => b.kind === "decision" || b.kind === "hitl_decision")
      .map((b) => [b.kind, b.data.reason ?? b.data.decision, b.data.operator_id ?? null]);
    expect(trail).toEqual([
      ["decision", "hitl_all_calls", null],
      ["hitl_decision", "approve", "alice"],
      ["decision", "hitl_transition:approve", null],
    ]);
  });
});
