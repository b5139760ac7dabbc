// The state machine on its own: decide over a plain in-memory view — missing rows reported as keys,
// the evaluate transition's events, the small transitions, and determinism (fast-check).
import type {
  BudgetAccount,
  Config,
  HitlRequest,
  HitlRequestStatus,
  Nonce,
  SessionRecord,
} from "@leash/core";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  type Command,
  DEFAULT_HOLD_TTL_NS,
  decide,
  type Env,
  type EvaluateCommand,
  type EvaluateReply,
  holdId,
  type MachineEvent,
  REPLAY_INPUTS_VERSION,
  type StateView,
} from "../src/index.js";

const NOW = 1_700_000_000_000_000_000;

function sessionOf(config: Config, overrides: Partial<SessionRecord> = {}): SessionRecord {
  return {
    session_id: "s1",
    agent_id: "a",
    organization_id: "o",
    status: "ACTIVE",
    config,
    state: { circuit_tripped: false, total_calls: 0, session_started_ns: NOW - 1e9 },
    call_count: 0,
    created_ns: NOW - 1e9,
    updated_ns: NOW - 1e9,
    last_heartbeat_ns: NOW - 1e9,
    at_seq: null,
    ...overrides,
  };
}

function account(limit: string): BudgetAccount {
  return {
    account_id: "session:s1",
    scope: "session",
    parent_id: null,
    limit_usd: limit,
    spent_usd: "0",
    reserved_usd: "0",
    created_ns: NOW - 1e9,
    updated_ns: NOW - 1e9,
  } as BudgetAccount;
}

/** A view over fixed rows; `known` false hides them all (every read is then a missing key). */
function viewOf(
  rows: { session?: SessionRecord; accounts?: BudgetAccount[]; seen?: Nonce[] },
  known = true,
): StateView {
  return {
    session: (id) => (!known ? undefined : id === rows.session?.session_id ? rows.session : null),
    nonceSeen: (_id, nonce) => (!known ? undefined : (rows.seen ?? []).includes(nonce)),
    accounts: () => (!known ? undefined : rows.accounts),
    hitl: (): HitlRequest | null | undefined => (known ? null : undefined),
    hitlOf: (_id: string, _status: HitlRequestStatus) => (known ? [] : undefined),
  };
}

function envOf(draw = 0.5): Env {
  return { nowNs: NOW, rng: () => draw, newId: () => "req-1", holdTtlNs: DEFAULT_HOLD_TTL_NS };
}

function call(overrides: Partial<EvaluateCommand> = {}): EvaluateCommand {
  return {
    kind: "evaluate",
    sessionId: "s1",
    malformed: null,
    toolName: "search",
    params: { q: "x" },
    nonce: "n1",
    estimatedCostUsd: 0.25,
    previousError: undefined,
    expectedHash: undefined,
    rules: REPLAY_INPUTS_VERSION,
    ...overrides,
  };
}

const entries = (events: readonly MachineEvent[]) =>
  events.filter((e): e is Extract<MachineEvent, { type: "entry" }> => e.type === "entry");

describe("decide: evaluate", () => {
  it("reports the session as a key to fetch when the view does not hold it, and writes nothing", () => {
    const outcome = decide(viewOf({}, false), call(), envOf());
    expect(outcome).toEqual({ missing: [{ kind: "session", sessionId: "s1" }] });
  });

  it("allows within budget: a hold under the machine's id, the charged account, the row, one entry", () => {
    const outcome = decide(
      viewOf({ session: sessionOf({ budget_usd: 1 }), accounts: [account("1")] }),
      call(),
      envOf(),
    );
    if (!("events" in outcome)) throw new Error(JSON.stringify(outcome));
    const reply = outcome.reply as EvaluateReply;
    expect(reply.decision).toEqual({ verdict: "ALLOW", reason: "within_thresholds" });
    expect(reply.reservationId).toBe(holdId("s1", 1));
    expect(reply.remaining).toBe("0.75");
    expect(outcome.events.map((e) => e.type)).toEqual(["account", "hold", "session", "entry"]);
    const [entry] = entries(outcome.events);
    expect(entry!.data).toMatchObject({
      call_number: 1,
      verdict: "ALLOW",
      budget_before_usd: "1",
      budget_after_usd: "0.75",
      hold_ttl_ns: DEFAULT_HOLD_TTL_NS,
      now_ns: NOW,
    });
    expect(entry!.spends).toEqual({ nonce: "n1" });
  });

  it("denies a replayed nonce without a hold or a spend", () => {
    const outcome = decide(viewOf({ session: sessionOf({}), seen: ["n1"] }), call(), envOf());
    if (!("events" in outcome)) throw new Error(JSON.stringify(outcome));
    expect((outcome.reply as EvaluateReply).decision.verdict).toBe("DENY");
    expect(entries(outcome.events)[0]!.spends).toBeUndefined();
    expect(outcome.events.some((e) => e.type === "hold")).toBe(false);
  });

  it("a malformed call records its problem, not its tool name or nonce", () => {
    const outcome = decide(
      viewOf({ session: sessionOf({}) }),
      call({ malformed: "tool_name must be a non-empty string", toolName: "", nonce: undefined }),
      envOf(),
    );
    if (!("events" in outcome)) throw new Error(JSON.stringify(outcome));
    expect(entries(outcome.events)[0]!.data).toMatchObject({
      tool_name: null,
      nonce: null,
      verdict: "DENY",
      reason: "policy_violation:malformed_input",
      input_problem: "tool_name must be a non-empty string",
    });
  });
});

describe("decide: the other transitions", () => {
  it("reset, stale and revive each give their row and their one entry", () => {
    const tripped = sessionOf({}, { state: { circuit_tripped: true, circuit_trip_reason: "x" } as never });
    const reset = decide(
      viewOf({ session: tripped }),
      { kind: "reset", sessionId: "s1", operatorId: "op" },
      envOf(),
    );
    if (!("events" in reset)) throw new Error("reset");
    expect(entries(reset.events)[0]).toMatchObject({ kind: "circuit_reset", data: { trip_reason: "x" } });
    const stale: Command = {
      kind: "mark_stale",
      sessionId: "s1",
      staleAfterNs: 1,
      heartbeatIntervalMs: 30_000,
      missedHeartbeats: 3,
    };
    const gone = decide(viewOf({ session: sessionOf({}) }), stale, envOf());
    if (!("events" in gone)) throw new Error("stale");
    expect(entries(gone.events)[0]).toMatchObject({
      kind: "session_stale",
      data: { previous_status: "ACTIVE" },
    });
    const back = decide(
      viewOf({ session: sessionOf({}, { status: "STALE" }) }),
      { kind: "heartbeat", sessionId: "s1" },
      envOf(),
    );
    if (!("events" in back)) throw new Error("heartbeat");
    expect(entries(back.events).map((e) => e.kind)).toEqual(["session_revived"]);
  });

  it("refuses an answer when the session has nothing awaiting a human", () => {
    const outcome = decide(
      viewOf({ session: sessionOf({}) }),
      { kind: "answer", sessionId: "s1", decision: "approve", operatorId: "op" },
      envOf(),
    );
    expect(outcome).toMatchObject({ error: { code: "no_pending_request" } });
  });

  it("registers a new session with its account, and resumes an existing one of the agent", () => {
    const command: Command = {
      kind: "register",
      sessionId: "s1",
      agentId: "a",
      organizationId: "o",
      config: { budget_usd: 2 },
    };
    const fresh = decide(viewOf({}), command, envOf());
    if (!("events" in fresh)) throw new Error("register");
    expect(fresh.events.map((e) => e.type)).toEqual(["ensure_account", "session", "entry"]);
    const again = decide(viewOf({ session: sessionOf({}) }), command, envOf());
    expect(again).toMatchObject({ events: [], reply: { resumed: true } });
  });
});

describe("decide is deterministic", () => {
  it("the same view, command and env give the same events and reply", () => {
    const configs = fc.record(
      {
        budget_usd: fc.constantFrom(0.5, 1, 10),
        max_repeat_calls: fc.integer({ min: 1, max: 5 }),
        deny_probability: fc.constantFrom(0, 0.3),
        denied_tools: fc.constantFrom([], ["rm"]),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(
        configs,
        fc.constantFrom("search", "rm", "ls"),
        fc.dictionary(fc.string({ maxLength: 4 }), fc.oneof(fc.integer(), fc.string({ maxLength: 6 }))),
        fc.option(fc.oneof(fc.string({ minLength: 1, maxLength: 4 }), fc.integer()), { nil: undefined }),
        fc.option(fc.double({ min: 0, max: 2, noNaN: true }), { nil: undefined }),
        fc.double({ min: 0, max: 0.999, noNaN: true }),
        fc.array(fc.string({ minLength: 1, maxLength: 4 }), { maxLength: 3 }),
        (config, toolName, params, nonce, estimate, draw, seen) => {
          const limit = String(config.budget_usd ?? 1);
          const run = () =>
            decide(
              viewOf({ session: sessionOf(config as Config), accounts: [account(limit)], seen }),
              call({ toolName, params, nonce, estimatedCostUsd: estimate }),
              envOf(draw),
            );
          const first = run();
          expect(run()).toEqual(first);
          expect("events" in first).toBe(true);
        },
      ),
      { numRuns: 200 },
    );
  });
});
