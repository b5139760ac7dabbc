// The demo's scripted agent runs: a 401 retry loop, a budget meeting its threshold and overrun, a replay.
// Each talks to Leash only through the public engine API; printing is the caller's (see main.ts).
import { canonicalHash } from "@leash/core";
import { type Engine, type EvaluateResult, guard, LeashDenied, LeashHitl } from "@leash/engine";

export interface Step {
  scenario: string;
  label: string;
  result: EvaluateResult;
  note?: string;
}

export type Report = (step: Step) => void;

/** An agent retries a CRM lookup that keeps failing with 401; error amplification stops the loop early. */
export async function retryLoop(engine: Engine, report: Report): Promise<void> {
  const session = await engine.register({
    agent_id: "support-bot",
    config: { max_repeat_calls: 4, error_amplification: true, budget_usd: 5 },
  });
  let lastError: string | undefined;
  for (let attempt = 1; attempt <= 10; attempt++) {
    const params = lastError ? { customer: "acme", last_error: lastError } : { customer: "acme" };
    const result = await engine.evaluate({
      session_id: session.session_id,
      tool_name: "crm.lookup",
      params,
      nonce: `crm-${attempt}`,
      estimated_cost_usd: 0.01,
    });
    if (result.verdict !== "ALLOW") {
      report({ scenario: "retry loop", label: `attempt ${attempt}`, result, note: "Leash stopped the loop" });
      return;
    }
    // The tool runs only on ALLOW; it fails as it always does, and the agent retries with the error.
    lastError = "HTTP 401 Unauthorized: invalid api key";
    await engine.postExec({
      session_id: session.session_id,
      call_number: result.call_number,
      actual_cost_usd: 0.01,
      success: false,
    });
    report({
      scenario: "retry loop",
      label: `attempt ${attempt}`,
      result,
      note: "tool ran: 401 Unauthorized",
    });
  }
}

/** Spends toward a $1.00 budget: meets the HITL threshold, a human approves once, then the budget runs out. */
export async function budget(engine: Engine, report: Report): Promise<void> {
  const session = await engine.register({
    agent_id: "research-bot",
    config: { budget_usd: 1, hitl_mode: "on_threshold", hitl_budget_threshold: 0.25 },
  });
  // The agent's tool, wrapped: Leash decides before it runs and settles its cost after.
  const call = async (label: string, doc: string, nonce: string) => {
    let ran = false;
    let decided: EvaluateResult | undefined;
    const summarize = guard(
      engine,
      {
        session_id: session.session_id,
        tool_name: "llm.summarize",
        estimate: 0.2,
        nonce: () => nonce,
        onDecision: (r) => (decided = r),
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
    report({
      scenario: "budget",
      label,
      result: decided!,
      note: ran ? "tool ran, $0.20 settled" : "tool did not run",
    });
  };
  for (let i = 1; i <= 5; i++) await call(`summary ${i}`, `report-${i}.pdf`, `sum-${i}`);
  // A human looks at the paused call and approves exactly that call (same nonce, same arguments).
  await engine.resume({
    session_id: session.session_id,
    decision: "approve",
    operator_id: "alice@example.com",
  });
  await call("summary 5, approved by alice", "report-5.pdf", "sum-5");
  await call("summary 5 again (replayed)", "report-5.pdf", "sum-5");

  // A second agent with $0.50 tries a call that costs more than what is left.
  const small = await engine.register({ agent_id: "research-bot-2", config: { budget_usd: 0.5 } });
  for (const [i, cost] of [
    [1, 0.2],
    [2, 0.2],
    [3, 0.25],
  ] as const) {
    const result = await engine.evaluate({
      session_id: small.session_id,
      tool_name: "llm.summarize",
      params: { doc: `memo-${i}` },
      nonce: `memo-${i}`,
      estimated_cost_usd: cost,
    });
    if (result.verdict === "ALLOW")
      await engine.postExec({
        session_id: small.session_id,
        call_number: result.call_number,
        actual_cost_usd: cost,
      });
    report({ scenario: "budget", label: `memo ${i} ($${cost.toFixed(2)})`, result });
  }
}

/** A payment is allowed once; the same signed-off nonce sent again is a replay and is refused. */
export async function replay(engine: Engine, report: Report): Promise<void> {
  const session = await engine.register({ agent_id: "billing-bot", config: { budget_usd: 100 } });
  const params = { amount_usd: 42, to: "acct_7781" };
  const first = await engine.evaluate({
    session_id: session.session_id,
    tool_name: "payments.send",
    params,
    nonce: "pay-0001",
    estimated_cost_usd: 0.05,
  });
  report({
    scenario: "replay",
    label: "payment",
    result: first,
    note: `args digest ${canonicalHash(params).slice(0, 12)}…`,
  });
  const again = await engine.evaluate({
    session_id: session.session_id,
    tool_name: "payments.send",
    params,
    nonce: "pay-0001",
    estimated_cost_usd: 0.05,
  });
  report({ scenario: "replay", label: "same nonce again", result: again, note: "replay refused" });
}
