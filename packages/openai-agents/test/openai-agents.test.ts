// The OpenAI Agents SDK's real Runner with a scripted Model (no network, no key), tools wrapped by
// leashTool over an engine on a real SQLite file: DENY as the guardrail's rejection, HITL as interruptions.
import { generateKeyPair, verifyChain } from "@leash/chain";
import { createEngine, type Engine } from "@leash/engine";
import { openStore, type TestStore } from "@leash/test-stores";
import { Agent, Runner, setTracingDisabled, tool } from "@openai/agents";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { leashGuardrails, leashTool } from "../src/index.js";
import { LoopingModel, resultsIn } from "./scripted-model.js";

const KEY = generateKeyPair();

async function chainOf(store: TestStore) {
  const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 1_000_000));
  const verified = await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] });
  return { verified, bodies: entries.map((e) => ({ kind: e.kind, data: JSON.parse(e.body).data })) };
}

describe("Leash in the OpenAI Agents SDK", () => {
  let store: TestStore | undefined;
  let engine: Engine | undefined;
  beforeAll(() => setTracingDisabled(true));
  afterEach(async () => {
    await engine?.close();
    await store?.close();
    store = undefined;
    engine = undefined;
  });
  const setup = async (config: Record<string, unknown>) => {
    store = await openStore("sqlite", { label: "openaiagents" });
    engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    const session = await engine.register({ agent_id: "agents-bot", config });
    return { engine, sessionId: session.session_id };
  };

  it("the tool runs until the repeat guard denies it; the guardrail's rejection reaches the model", async () => {
    const { engine, sessionId } = await setup({ max_repeat_calls: 3, budget_usd: 1 });
    const ran: string[] = [];
    const guardrails = leashGuardrails(engine, {
      session_id: sessionId,
      estimate: "0.1",
      cost: () => "0.03",
    });
    const search = leashTool(
      tool({
        name: "search",
        description: "Search the web",
        parameters: z.object({ q: z.string() }),
        execute: async ({ q }) => {
          ran.push(q);
          return "no results";
        },
      }),
      guardrails,
    );
    const model = new LoopingModel("search", { q: "pricing" });
    const agent = new Agent({ name: "researcher", instructions: "Find things.", model, tools: [search] });
    const result = await new Runner({ tracingDisabled: true }).run(agent, "find the pricing", {
      maxTurns: 8,
    });

    expect(ran).toEqual(["pricing", "pricing", "pricing"]);
    expect(result.finalOutput).toBe("Stopping: Leash denied the call.");
    // The 5th request carried three results and then the rejection message, as the SDK sends them.
    const sent = resultsIn(model.requests[4]!.input);
    expect(sent).toHaveLength(4);
    expect(sent.slice(0, 3).every((r) => r.includes("no results"))).toBe(true);
    expect(sent[3]).toContain("Leash denied search");
    expect(sent[3]).toContain("(max_repeat_exceeded)");
    // The SDK recorded the guardrail's verdict with Leash's reason and receipt.
    const rejected = result.state._toolInputGuardrailResults.filter(
      (g) => g.output.behavior.type === "rejectContent",
    );
    expect(rejected).toHaveLength(1);
    expect(rejected[0]!.output.outputInfo).toMatchObject({
      leash: { verdict: "DENY", reason: "max_repeat_exceeded", receipt: expect.any(String) },
    });

    const { verified, bodies } = await chainOf(store!);
    expect(verified.ok).toBe(true);
    expect(bodies.filter((b) => b.kind === "decision").map((b) => b.data.reason)).toEqual([
      "within_thresholds",
      "within_thresholds",
      "within_thresholds",
      "max_repeat_exceeded",
    ]);
    // The output guardrail settled each allowed call at the tool's actual cost.
    expect(bodies.filter((b) => b.kind === "post_exec").map((b) => b.data.actual_usd)).toEqual([
      "0.03",
      "0.03",
      "0.03",
    ]);
    expect((await engine.getSession(sessionId)).budget_remaining_usd).toBe("0.91");
  });

  it("HITL is the SDK's interruption carrying Leash's request; state.approve() records the approval", async () => {
    const { engine, sessionId } = await setup({ hitl_mode: "always" });
    const sent: string[] = [];
    const guardrails = leashGuardrails(engine, { session_id: sessionId, approver: "alice@example.com" });
    const sendEmail = leashTool(
      tool({
        name: "send_email",
        description: "Send an email",
        parameters: z.object({ to: z.string() }),
        execute: async ({ to }) => {
          sent.push(to);
          return "sent";
        },
      }),
      guardrails,
    );
    const model = new LoopingModel("send_email", { to: "bob@example.com" });
    const agent = new Agent({ name: "mailer", model, tools: [sendEmail] });
    const runner = new Runner({ tracingDisabled: true });
    const first = await runner.run(agent, "mail bob", { maxTurns: 4 });

    expect(sent).toEqual([]);
    expect(first.interruptions).toHaveLength(1);
    const interruption = first.interruptions[0]!;
    const request = guardrails.pendingRequest(interruption);
    const paused = await engine.getSession(sessionId);
    expect(paused.status).toBe("PAUSED");
    expect(request).toMatchObject({ reason: "hitl_all_calls", receipt: expect.any(String) });
    expect(request?.request_id).toBe(
      (paused.state.pending_request as unknown as { request_id: string }).request_id,
    );

    first.state.approve(interruption);
    // After the tool ran, the looping model calls again: that new call pauses again, and the run ends there.
    const second = await runner.run(agent, first.state, { maxTurns: 4 });
    expect(sent).toEqual(["bob@example.com"]);
    expect(second.interruptions).toHaveLength(1);

    const { verified, bodies } = await chainOf(store!);
    expect(verified.ok).toBe(true);
    const trail = bodies
      .filter((b) => b.kind === "decision" || b.kind === "hitl_decision")
      .map((b) => [b.kind, b.data.reason ?? b.data.decision, b.data.operator_id ?? null]);
    expect(trail).toEqual([
      ["decision", "hitl_all_calls", null],
      ["hitl_decision", "approve", "alice@example.com"],
      ["decision", "hitl_transition:approve", null],
      ["decision", "hitl_all_calls", null],
    ]);
  });
  it("the input guardrail alone (no needsApproval) rejects a HITL call: it never runs unapproved", async () => {
    const { sessionId } = await setup({ hitl_mode: "always" });
    let runs = 0;
    const guardrails = leashGuardrails(engine!, { session_id: sessionId });
    const deploy = tool({
      name: "deploy",
      description: "Deploy",
      parameters: z.object({ env: z.string() }),
      inputGuardrails: [guardrails.inputGuardrail],
      execute: async () => {
        runs += 1;
        return "deployed";
      },
    });
    const model = new LoopingModel("deploy", { env: "prod" });
    const agent = new Agent({ name: "ops", model, tools: [deploy] });
    const result = await new Runner({ tracingDisabled: true }).run(agent, "deploy", { maxTurns: 4 });
    expect(runs).toBe(0);
    expect(result.interruptions).toEqual([]);
    expect(result.finalOutput).toBe("Stopping: Leash denied the call.");
    const sent = resultsIn(model.requests[1]!.input);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatch(/Leash paused deploy: .*\(hitl_all_calls\); the tool did not run/);
  });
});
