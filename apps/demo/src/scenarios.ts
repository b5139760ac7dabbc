// The demo's scenes: scripted agents meet a retry loop, a human in the loop, a budget and a replay.
// Each talks to Leash only through the public engine API and tells its story to a Narrator (main.ts prints).
import { type Config, canonicalHash } from "@leash/core";
import { type Engine, type EvaluateResult, guard, LeashDenied, LeashHitl } from "@leash/engine";

export interface Agent {
  agent_id: string;
  /** What the agent does, in a few words. */
  role: string;
  config: Config;
}

export interface Step {
  scene: string;
  agent_id: string;
  session_id: string;
  label: string;
  result: EvaluateResult;
  note?: string;
}

/** Where a scene tells what happens: scene and agent introductions first, then each decision. */
export interface Narrator {
  scene(title: string, story: string): void;
  introduce(agent: Agent): void;
  step(step: Step): void;
  /** Something that is not a decision (a human's answer). */
  aside(text: string): void;
}

async function register(engine: Engine, narrator: Narrator, agent: Agent): Promise<string> {
  narrator.introduce(agent);
  return (await engine.register({ agent_id: agent.agent_id, config: agent.config })).session_id;
}

const RETRY = "A retry loop";

/** An agent retries a CRM lookup that keeps failing with 401; error amplification stops the loop early. */
export async function retryLoop(engine: Engine, narrator: Narrator): Promise<void> {
  narrator.scene(
    RETRY,
    "The CRM's API key is wrong, so every lookup fails with 401 Unauthorized. The agent does what agents do: it retries, with the error attached. Without a guard it would loop until someone noticed the bill.",
  );
  const agent: Agent = {
    agent_id: "support-bot",
    role: "answers support tickets; looks customers up in the CRM",
    config: { max_repeat_calls: 4, error_amplification: true, budget_usd: 5 },
  };
  const sessionId = await register(engine, narrator, agent);
  let lastError: string | undefined;
  for (let attempt = 1; attempt <= 10; attempt++) {
    const params = lastError ? { customer: "acme", last_error: lastError } : { customer: "acme" };
    const result = await engine.evaluate({
      session_id: sessionId,
      tool_name: "crm.lookup",
      params,
      nonce: `crm-${attempt}`,
      estimated_cost_usd: 0.01,
    });
    const step = {
      scene: RETRY,
      agent_id: agent.agent_id,
      session_id: sessionId,
      label: `attempt ${attempt}`,
    };
    if (result.verdict !== "ALLOW") {
      narrator.step({ ...step, result, note: "Leash stopped the loop" });
      return;
    }
    // The tool runs only on ALLOW; it fails as it always does, and the agent retries with the error.
    lastError = "HTTP 401 Unauthorized: invalid api key";
    await engine.postExec({
      session_id: sessionId,
      call_number: result.call_number,
      actual_cost_usd: 0.01,
      success: false,
    });
    narrator.step({ ...step, result, note: "tool ran: 401 Unauthorized" });
  }
}

const HUMAN = "A human in the loop";

/** Spends toward a $1.00 budget: meets the HITL threshold, a human approves once, the replay is refused. */
export async function humanInTheLoop(engine: Engine, narrator: Narrator): Promise<void> {
  narrator.scene(
    HUMAN,
    "A research agent summarizes reports at $0.20 each. Near the end of its budget Leash pauses it and asks a person; the person approves that one call, and only that one.",
  );
  const agent: Agent = {
    agent_id: "research-bot",
    role: "summarizes PDF reports with an LLM, $0.20 a summary",
    config: { budget_usd: 1, hitl_mode: "on_threshold", hitl_budget_threshold: 0.25 },
  };
  const sessionId = await register(engine, narrator, agent);
  // The agent's tool, wrapped: Leash decides before it runs and settles its cost after.
  const call = async (label: string, doc: string, nonce: string) => {
    let ran = false;
    let decided: EvaluateResult | undefined;
    const summarize = guard(
      engine,
      {
        session_id: sessionId,
        tool_name: "llm.summarize",
        estimate: 0.2,
        nonce: () => nonce,
        onDecision: (r) => (decided = r),
        // The scene shows the pause, then the human's answer, then the agent sending the call again;
        // a real agent would let guard() wait for the answer instead.
        wait: false,
      },
      async (_args: { doc: string }) => {
        ran = true;
        return "summary";
      },
    );
    try {
      await summarize({ doc });
    } catch (error) {
      if (!(error instanceof LeashDenied || error instanceof LeashHitl)) throw error;
    }
    narrator.step({
      scene: HUMAN,
      agent_id: agent.agent_id,
      session_id: sessionId,
      label,
      result: decided!,
      note: ran ? "tool ran, $0.20 settled" : "tool did not run",
    });
  };
  for (let i = 1; i <= 5; i++) await call(`summary ${i}`, `report-${i}.pdf`, `sum-${i}`);
  // A human looks at the paused call and approves exactly that call (same nonce, same arguments).
  await engine.resume({ session_id: sessionId, decision: "approve", operator_id: "alice@example.com" });
  narrator.aside(
    "alice@example.com approves the paused call (`leash hitl approve <request id>`, or the console); the agent sends it again",
  );
  await call("summary 5, approved by alice", "report-5.pdf", "sum-5");
  await call("summary 5 again (replayed)", "report-5.pdf", "sum-5");
}

const BUDGET = "A budget that runs out";

/** A second agent with $0.50 tries a call that costs more than what is left. */
export async function budget(engine: Engine, narrator: Narrator): Promise<void> {
  narrator.scene(
    BUDGET,
    "Another research agent has $0.50 and no human to ask. Its third memo would cost $0.25 with $0.10 left: Leash refuses it before it runs, so the budget is never overspent.",
  );
  const agent: Agent = {
    agent_id: "research-bot-2",
    role: "writes memos with an LLM; each call says what it will cost",
    config: { budget_usd: 0.5 },
  };
  const sessionId = await register(engine, narrator, agent);
  for (const [i, cost] of [
    [1, 0.2],
    [2, 0.2],
    [3, 0.25],
  ] as const) {
    const result = await engine.evaluate({
      session_id: sessionId,
      tool_name: "llm.summarize",
      params: { doc: `memo-${i}` },
      nonce: `memo-${i}`,
      estimated_cost_usd: cost,
    });
    if (result.verdict === "ALLOW")
      await engine.postExec({
        session_id: sessionId,
        call_number: result.call_number,
        actual_cost_usd: cost,
      });
    narrator.step({
      scene: BUDGET,
      agent_id: agent.agent_id,
      session_id: sessionId,
      label: `memo ${i} ($${cost.toFixed(2)})`,
      result,
      note: result.verdict === "ALLOW" ? `tool ran, $${cost.toFixed(2)} settled` : "tool did not run",
    });
  }
}

const REPLAY = "A replayed payment";

/** A payment is allowed once; the same nonce sent again is a replay and is refused. */
export async function replay(engine: Engine, narrator: Narrator): Promise<void> {
  narrator.scene(
    REPLAY,
    "A billing agent sends a payment. A retry in the network layer (or an attacker) sends the very same request again: Leash has seen its nonce and refuses it.",
  );
  const agent: Agent = {
    agent_id: "billing-bot",
    role: "pays supplier invoices through a payments API, $0.05 an API call",
    config: { budget_usd: 1 },
  };
  const sessionId = await register(engine, narrator, agent);
  const params = { amount_usd: 42, to: "acct_7781" };
  const send = () =>
    engine.evaluate({
      session_id: sessionId,
      tool_name: "payments.send",
      params,
      nonce: "pay-0001",
      estimated_cost_usd: 0.05,
    });
  const step = { scene: REPLAY, agent_id: agent.agent_id, session_id: sessionId };
  narrator.step({
    ...step,
    label: "payment",
    result: await send(),
    note: `args digest ${canonicalHash(params).slice(0, 12)}…`,
  });
  narrator.step({ ...step, label: "same nonce again", result: await send(), note: "replay refused" });
}

/** The scenes in the order the demo plays them. */
export const SCENES = [retryLoop, humanInTheLoop, budget, replay] as const;
