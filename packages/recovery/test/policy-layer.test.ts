// The engine's policy layer on every real store: a rule per action decides real calls with its reason,
// versions are published in the chain and named by every decision, counters survive a restart, monitor
// never blocks, and replay re-derives every verdict (also across reloads, as a fast-check property).
import { generateKeyPair } from "@leash/chain";
import { createEngine, type PolicySource } from "@leash/engine";
import { loadPolicy } from "@leash/policy";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { compareSnapshots, replayChain } from "../src/index.js";
import { KINDS, type Kind, manualClock, openStore, type TestStore } from "./support.js";

const KEY = generateKeyPair();

const POLICY = `
version: 1
name: ops
rules:
  - name: no-drop
    match: { tool: db.drop }
    action: deny
    message: Dropping tables is not allowed.
  - name: big-payments
    match: { tool: payments.send }
    when: "has(args.amount_usd) && args.amount_usd > 500"
    action: hitl
  - name: search-rate
    match: { tool: search }
    action: { rate: { limit: 2, window_s: 60, per: agent } }
  - name: shadow-delete
    match: { tool: fs.delete }
    action: deny
    message: would refuse deletes
    mode: monitor
  - name: ok-read
    match: { tool: fs.read }
    action: allow
`;

async function chainOf(store: TestStore) {
  return store.substrate.transaction((tx) => tx.chain.range(0, 10_000));
}

async function expectReplayOk(store: TestStore) {
  const result = await replayChain(await chainOf(store));
  expect(result.mismatch).toBeNull();
  expect(result.proved_from).toBe(0);
  expect(await compareSnapshots(store.substrate, result.projection)).toEqual([]);
  return result;
}

describe.each(KINDS)("the policy layer on %s", (kind: Kind) => {
  let store: TestStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it("decides with a rule per action, publishes its version, counts per rule across a restart, replays", async () => {
    store = await openStore(kind);
    const clock = manualClock();
    const policy = loadPolicy(POLICY);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, clock, policy });
    await engine.register({ agent_id: "bot", session_id: "s", config: { max_repeat_calls: 100 } });
    const call = (tool_name: string, params: Record<string, unknown>, nonce: string) =>
      engine.evaluate({ session_id: "s", tool_name, params, nonce });

    const dropped = await call("db.drop", { table: "t" }, "1");
    expect([dropped.verdict, dropped.reason]).toEqual(["DENY", "policy_violation:rule:no-drop"]);
    const small = await call("payments.send", { amount_usd: 20 }, "2");
    expect([small.verdict, small.reason]).toEqual(["ALLOW", "within_thresholds"]);
    const big = await call("payments.send", { amount_usd: 900 }, "3");
    expect([big.verdict, big.reason]).toEqual(["HITL", "policy_hitl:rule:big-payments"]);
    const [request] = await engine.listHitl({ sessionId: "s", status: "pending" });
    expect(request?.reason).toBe("policy_hitl:rule:big-payments");
    await engine.answerHitl(request!.request_id, { decision: "approve", operatorId: "alice" });
    const released = await call("payments.send", { amount_usd: 900 }, "3");
    expect(released.verdict).toBe("ALLOW");
    const deleted = await call("fs.delete", { path: "/tmp/x" }, "4");
    expect([deleted.verdict, deleted.reason]).toEqual(["ALLOW", "within_thresholds"]);
    expect((await call("fs.read", { path: "/a" }, "5")).verdict).toBe("ALLOW");
    expect((await call("search", { q: "a" }, "6")).verdict).toBe("ALLOW");
    expect((await call("search", { q: "b" }, "7")).verdict).toBe("ALLOW");
    const third = await call("search", { q: "c" }, "8");
    expect([third.verdict, third.reason]).toEqual(["DENY", "policy_violation:rule:search-rate"]);
    // A policy DENY is counted, like a denied tool: the circuit stays closed.
    expect((await engine.getSession("s")).state.circuit_tripped).toBe(false);

    let entries = await chainOf(store);
    const published = entries.filter((e) => e.kind === "policy_published");
    expect(published).toHaveLength(1);
    const pub = JSON.parse(published[0]!.body).data;
    expect([pub.policy_hash, pub.name, pub.canonical]).toEqual([policy.hash, "ops", policy.canonical]);
    const decisions = entries.filter((e) => e.kind === "decision").map((e) => JSON.parse(e.body).data);
    expect(decisions.every((d) => d.policy_hash === policy.hash)).toBe(true);
    const shadow = decisions.find((d) => d.tool_name === "fs.delete");
    expect(shadow.policy.monitor).toEqual([
      {
        rule: "shadow-delete",
        would: "DENY rule:shadow-delete",
        reason: "policy_violation:rule:shadow-delete",
      },
    ]);
    expect(decisions.find((d) => d.reason === "policy_violation:rule:no-drop").policy.rule).toBe("no-drop");
    expect((await expectReplayOk(store)).verdicts_checked).toBe(decisions.length);

    // A second engine on the same store: the counters come from the chain, the version is not published twice.
    const again = createEngine({ substrate: store.substrate, signer: KEY.signer, clock, policy });
    const fourth = await again.evaluate({
      session_id: "s",
      tool_name: "search",
      params: { q: "d" },
      nonce: "9",
    });
    expect(fourth.reason).toBe("policy_violation:rule:search-rate");
    clock.advanceMs(60_000); // the next window
    const later = await again.evaluate({
      session_id: "s",
      tool_name: "search",
      params: { q: "e" },
      nonce: "10",
    });
    expect(later.verdict).toBe("ALLOW");
    entries = await chainOf(store);
    expect(entries.filter((e) => e.kind === "policy_published")).toHaveLength(1);
    await expectReplayOk(store);
  });

  it("feeds conditions the session's repeat count and spend: max_repeat fires, spent_usd is seen, replays", async () => {
    store = await openStore(kind);
    const policy = loadPolicy({
      version: 1,
      name: "session",
      rules: [
        { name: "poll-twice", match: { tool: "poll" }, action: { max_repeat: 2 } },
        {
          name: "stop-spending",
          match: { tool: "pay" },
          when: "session.spent_usd >= 1.0",
          action: "deny",
          message: "this session has spent enough",
        },
      ],
    });
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, policy });
    await engine.register({
      agent_id: "bot",
      session_id: "s",
      config: { max_repeat_calls: 100, budget_usd: 10 },
    });
    let nonce = 0;
    const call = (tool_name: string, params: Record<string, unknown>, estimated_cost_usd: number) =>
      engine.evaluate({ session_id: "s", tool_name, params, nonce: String(nonce++), estimated_cost_usd });

    // max_repeat: 2 lets two identical calls through and refuses the third.
    expect((await call("poll", { job: 1 }, 0)).verdict).toBe("ALLOW");
    expect((await call("poll", { job: 1 }, 0)).verdict).toBe("ALLOW");
    const third = await call("poll", { job: 1 }, 0);
    expect([third.verdict, third.reason]).toEqual(["DENY", "policy_violation:rule:poll-twice"]);
    // Other arguments start a new run.
    expect((await call("poll", { job: 2 }, 0)).verdict).toBe("ALLOW");

    const first = await call("pay", { to: "a" }, 0.6);
    expect(first.verdict).toBe("ALLOW");
    await engine.postExec({ session_id: "s", call_number: first.call_number, actual_cost_usd: 0.6 });
    // Held but not yet settled money is not spent: still allowed.
    const second = await call("pay", { to: "b" }, 0.5);
    expect(second.verdict).toBe("ALLOW");
    await engine.postExec({ session_id: "s", call_number: second.call_number, actual_cost_usd: 0.5 });
    const refused = await call("pay", { to: "c" }, 0.1);
    expect([refused.verdict, refused.reason]).toEqual(["DENY", "policy_violation:rule:stop-spending"]);
    await expectReplayOk(store);
  });

  it("holds a call without an estimate at its estimate_usd rule's, the call's own first, and replays", async () => {
    store = await openStore(kind);
    const policy = loadPolicy({
      version: 1,
      name: "estimates",
      rules: [{ name: "search-cost", match: { tool: "search" }, action: { estimate_usd: 0.25 } }],
    });
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, policy });
    await engine.register({
      agent_id: "bot",
      session_id: "s",
      config: { max_repeat_calls: 100, budget_usd: 1 },
    });
    const held = await engine.evaluate({
      session_id: "s",
      tool_name: "search",
      params: { q: 1 },
      nonce: "1",
    });
    expect([held.verdict, held.estimate_usd]).toEqual(["ALLOW", "0.25"]);
    expect((await engine.getSession("s")).budget_remaining_usd).toBe("0.75");
    // The call's own estimate comes first.
    const own = await engine.evaluate({
      session_id: "s",
      tool_name: "search",
      params: { q: 2 },
      nonce: "2",
      estimated_cost_usd: 0.1,
    });
    expect([own.verdict, own.estimate_usd]).toEqual(["ALLOW", "0.1"]);
    expect((await engine.getSession("s")).budget_remaining_usd).toBe("0.65");
    // A tool no rule gives an estimate still needs one.
    const other = await engine.evaluate({ session_id: "s", tool_name: "fetch", params: {}, nonce: "3" });
    expect([other.verdict, other.reason]).toEqual(["DENY", "policy_violation:missing_estimate"]);
    await expectReplayOk(store);
  });

  it("swaps versions at a reload: the new one is published first, each decision names its own", async () => {
    store = await openStore(kind);
    let current = loadPolicy({ version: 1, name: "v", rules: [] });
    const source: PolicySource = { current: () => current };
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, policy: source });
    await engine.register({ agent_id: "bot", session_id: "s", config: {} });
    expect((await engine.evaluate({ session_id: "s", tool_name: "x", nonce: "1" })).verdict).toBe("ALLOW");
    const first = current.hash;
    current = loadPolicy({ version: 1, name: "v", default: "deny", rules: [] });
    const denied = await engine.evaluate({ session_id: "s", tool_name: "x", nonce: "2" });
    expect([denied.verdict, denied.reason]).toEqual(["DENY", "policy_violation:default_deny"]);
    const entries = await chainOf(store);
    expect(entries.map((e) => e.kind)).toEqual([
      "session_registered",
      "policy_published",
      "decision",
      "policy_published",
      "decision",
    ]);
    const hashes = entries
      .filter((e) => e.kind === "decision")
      .map((e) => JSON.parse(e.body).data.policy_hash);
    expect(hashes).toEqual([first, current.hash]);
    await expectReplayOk(store);
  });

  it("a policy in monitor mode never blocks", async () => {
    store = await openStore(kind);
    const policy = loadPolicy({
      version: 1,
      name: "shadow",
      mode: "monitor",
      default: "deny",
      rules: [
        { name: "never", match: { tool: "*" }, action: "deny", message: "no" },
        { name: "human", match: { tool: "*" }, action: "hitl" },
        { name: "rate", match: { tool: "*" }, action: { rate: { limit: 1, window_s: 3600 } } },
      ],
    });
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, policy });
    await engine.register({ agent_id: "bot", session_id: "s", config: { max_repeat_calls: 100 } });
    for (let i = 0; i < 4; i++) {
      const r = await engine.evaluate({ session_id: "s", tool_name: "t", params: { i }, nonce: String(i) });
      expect([r.verdict, r.reason]).toEqual(["ALLOW", "within_thresholds"]);
    }
    const decisions = (await chainOf(store)).filter((e) => e.kind === "decision");
    const monitor = JSON.parse(decisions[3]!.body).data.policy.monitor;
    expect(monitor.map((m: { would: string }) => m.would)).toEqual([
      "DENY rule:never",
      "HITL rule:human",
      "DENY rule:rate",
      "DENY default",
    ]);
    await expectReplayOk(store);
  });
});

describe("replay re-derives every policy verdict across reloads (property)", () => {
  const versions = [
    loadPolicy({
      version: 1,
      name: "a",
      rules: [{ name: "r", match: { tool: "t*" }, action: { rate: { limit: 2, window_s: 60 } } }],
    }),
    loadPolicy({
      version: 1,
      name: "b",
      rules: [
        {
          name: "big",
          match: { tool: "*" },
          when: "has(args.n) && args.n > 5",
          action: "deny",
          message: "big",
        },
        { name: "r", match: { tool: "t*" }, action: { rate: { limit: 1, window_s: 60, per: "session" } } },
      ],
    }),
    loadPolicy({
      version: 1,
      name: "c",
      default: "deny",
      rules: [{ name: "t1", match: { tool: "t1" }, action: "allow" }],
    }),
  ];
  const step = fc.oneof(
    fc.record({
      op: fc.constant("call" as const),
      session: fc.nat(1),
      tool: fc.constantFrom("t1", "t2", "u"),
      n: fc.nat(9),
    }),
    fc.record({ op: fc.constant("reload" as const), version: fc.nat(versions.length - 1) }),
    fc.record({ op: fc.constant("tick" as const), ms: fc.constantFrom(1_000, 30_000, 61_000) }),
  );

  it("on memory", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 25 }), async (steps) => {
        const store = await openStore("memory");
        try {
          const clock = manualClock();
          let current = versions[0]!;
          const engine = createEngine({
            substrate: store.substrate,
            signer: KEY.signer,
            clock,
            policy: { current: () => current },
          });
          for (const s of ["s0", "s1"])
            await engine.register({ agent_id: "bot", session_id: s, config: { max_repeat_calls: 100 } });
          let nonce = 0;
          for (const s of steps) {
            if (s.op === "reload") current = versions[s.version]!;
            else if (s.op === "tick") clock.advanceMs(s.ms);
            else
              await engine.evaluate({
                session_id: `s${s.session}`,
                tool_name: s.tool,
                params: { n: s.n },
                nonce: String(nonce++),
              });
          }
          const result = await replayChain(await chainOf(store));
          expect(result.mismatch).toBeNull();
          expect(result.proved_from).toBe(0);
        } finally {
          await store.close();
        }
      }),
      { numRuns: 40 },
    );
  });
});
