import { describe, expect, it } from "vitest";
import {
  afterPostExec,
  type Call,
  type Config,
  canonicalHash,
  decide,
  feedback,
  recordHumanDecision,
  resetCircuit,
  type State,
} from "../src/index.js";

const NOW = 5_000_000_000;
const call: Call = { tool_name: "fetch", params: { url: "https://x" }, nonce: 1, estimated_cost_usd: 0.25 };
const step = (config: Config, state: State, c: Call, nowNs = NOW) => {
  const decision = decide(config, state, c, { nowNs });
  return { decision, state: feedback(config, state, c, decision, { nowNs }) };
};

describe("feedback after ALLOW", () => {
  it("counts, records the nonce, the digest, the last tool, and holds back the estimate", () => {
    const { state } = step({ budget_usd: 1 }, { budget_initial_usd: 1, budget_remaining_usd: 1 }, call);
    expect(state.total_calls).toBe(1);
    expect(state.seen_nonces).toEqual([1]);
    expect(state.repeat_counts).toEqual({ fetch: 1 });
    expect(state.last_tool_name).toBe("fetch");
    expect(state.last_tool_params_hash).toBe(canonicalHash(call.params));
    expect(state.budget_remaining_usd).toBe(0.75);
    expect(state.session_started_ns).toBe(NOW);
  });
  it("counts consecutive identical calls and restarts on a different one", () => {
    let s: State = {};
    for (let i = 0; i < 3; i++) s = step({}, s, { ...call, nonce: i }).state;
    expect(s.repeat_counts).toEqual({ fetch: 3 });
    s = step({}, s, { ...call, nonce: 10, params: { url: "https://y" } }).state;
    expect(s.repeat_counts).toEqual({ fetch: 1 });
    s = step({}, s, { ...call, nonce: 11, tool_name: "other" }).state;
    expect(s.repeat_counts).toEqual({ other: 1 });
  });
  it("stops a loop of identical calls at max_repeat_calls", () => {
    let s: State = {};
    const verdicts: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = step({ max_repeat_calls: 3 }, s, { ...call, nonce: i });
      verdicts.push(r.decision.verdict);
      s = r.state;
    }
    expect(verdicts).toEqual(["ALLOW", "ALLOW", "ALLOW", "DENY", "DENY"]);
    expect(s.circuit_trip_reason).toBe("max_repeat_exceeded");
  });
  it("opens and advances a time window", () => {
    const cfg = { window_duration_s: 10, window_max_calls: 2 };
    let s = step(cfg, {}, call, NOW).state;
    expect(s.window_start_ns).toBe(NOW);
    s = step(cfg, s, { ...call, nonce: 2 }, NOW + 1e9).state;
    expect(s.window_counts).toEqual({ fetch: 2 });
    expect(step(cfg, s, { ...call, nonce: 3 }, NOW + 2e9).decision.reason).toBe("window_exceeded");
    const later = step(cfg, s, { ...call, nonce: 3 }, NOW + 11e9);
    expect(later.decision.verdict).toBe("ALLOW");
    expect(later.state.window_counts).toEqual({ fetch: 1 });
  });
  it("exhausts a $1 budget exactly at call 1,000 of $0.001", () => {
    const cfg = { budget_usd: 1 };
    let s: State = { budget_initial_usd: 1, budget_remaining_usd: 1 };
    let allowed = 0;
    for (let i = 0; i < 1001; i++) {
      const r = step(cfg, s, { tool_name: `t${i % 2}`, params: { i }, nonce: i, estimated_cost_usd: 0.001 });
      if (r.decision.verdict === "ALLOW") allowed++;
      else expect(r.decision.reason).toBe("budget_exhausted");
      s = r.state;
    }
    expect(allowed).toBe(1000);
  });
  it("consumes a released approval so it gates nothing afterwards", () => {
    const digest = canonicalHash(call.params);
    const s0: State = {
      status: "PAUSED",
      pending_transition: { decision: "approve", original_nonce: 1, original_args_digest: digest },
    };
    const r = step({}, s0, call);
    expect(r.decision.reason).toBe("hitl_transition:approve");
    expect(r.state.pending_transition).toBeNull();
    expect(r.state.status).toBe("ACTIVE");
    expect(step({}, r.state, call).decision.reason).toBe("policy_violation:duplicate_nonce");
  });
});

describe("feedback after DENY and HITL", () => {
  it("DENY trips the circuit and changes nothing else", () => {
    const s0: State = { budget_initial_usd: 1, budget_remaining_usd: 0, total_calls: 3, seen_nonces: [9] };
    const { decision, state } = step({ budget_usd: 1 }, s0, call);
    expect(decision.reason).toBe("budget_exhausted");
    expect(state).toEqual({
      ...s0,
      circuit_tripped: true,
      circuit_trip_reason: "budget_exhausted",
      circuit_tripped_at_ns: NOW,
    });
  });
  it("a second DENY keeps the first trip reason", () => {
    const s = step({ budget_usd: 1 }, { budget_remaining_usd: 0 }, call).state;
    expect(step({}, s, { ...call, nonce: 2 }).state.circuit_trip_reason).toBe("budget_exhausted");
  });
  it("HITL pauses and records the pending request with its digest", () => {
    const { state } = step({ hitl_mode: "always" }, {}, call);
    expect(state.status).toBe("PAUSED");
    expect(state.pending_request).toEqual({
      nonce: 1,
      args_digest: canonicalHash(call.params),
      tool_name: "fetch",
      reason: "hitl_all_calls",
    });
    expect(state.total_calls).toBeUndefined();
  });
});

describe("human decisions, resets and post-exec", () => {
  it("approve releases exactly the paused call", () => {
    const paused = step({ hitl_mode: "always" }, {}, call).state;
    const approved = recordHumanDecision(paused, "approve");
    expect(decide({}, approved, call).reason).toBe("hitl_transition:approve");
    expect(decide({}, approved, { ...call, params: { url: "https://evil" } }).reason).toBe(
      "hitl_transition:digest_mismatch",
    );
    expect(decide({}, recordHumanDecision(paused, "reject"), call).reason).toBe("hitl_transition:reject");
  });
  it("modify releases only the successor", () => {
    const paused = step({ hitl_mode: "always" }, {}, call).state;
    const edited = { ...call, nonce: 2, params: { url: "https://safe" } };
    const s = recordHumanDecision(paused, "modify", { nonce: 2, argsDigest: canonicalHash(edited.params) });
    expect(decide({}, s, edited).reason).toBe("hitl_transition:modify_successor");
    expect(decide({}, s, call).reason).toBe("hitl_transition:superseded_original");
  });
  it("reset closes the circuit", () => {
    const tripped = step({ budget_usd: 1 }, { budget_remaining_usd: 0 }, call).state;
    const reset = resetCircuit(tripped);
    expect(reset.circuit_tripped).toBe(false);
    expect(decide({}, reset, { ...call, nonce: 3 }).verdict).toBe("ALLOW");
  });
  it("post-exec settles the actual cost exactly and never drives remaining negative", () => {
    const s = { budget_remaining_usd: 0.75, budget_spent_usd: 0 };
    expect(afterPostExec(s, { actualCostUsd: 0.1, estimatedCostUsd: 0.25 })).toMatchObject({
      budget_remaining_usd: 0.9,
      budget_spent_usd: 0.1,
    });
    expect(afterPostExec(s, { actualCostUsd: 5, estimatedCostUsd: 0.25 })).toMatchObject({
      budget_remaining_usd: 0,
      budget_spent_usd: 5,
    });
  });
});
