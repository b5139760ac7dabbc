// What the agent leaves out or gets wrong, on every store: a budgeted call needs a valid estimate
// (its own or its config's default), read as an exact decimal; malformed input is a recorded DENY.
import { generateKeyPair, verifyChain } from "@leash/chain";
import type { ChainEntryRecord, Config, Substrate } from "@leash/core";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type EvaluateRequest, guard, LeashDenied, LeashError } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();

async function readChain(substrate: Substrate): Promise<ChainEntryRecord[]> {
  return substrate.transaction(async (tx) => tx.chain.range(0, 1_000_000));
}

const dataOf = (entry: ChainEntryRecord) =>
  (JSON.parse(entry.body) as { kind: string; data: Record<string, unknown> }).data;

describe.each(KINDS)("evaluate's input checks on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });
  const setup = async () => {
    store = await openStore(kind);
    const engine = createEngine({
      substrate: store.substrate,
      signer: KEY.signer,
      clock: { nowNs: () => 1_700_000_000_000_000_000 },
    });
    const session = async (config: Config) => (await engine.register({ agent_id: "bot", config })).session_id;
    return { engine, substrate: store.substrate, session };
  };

  it("denies a budgeted call whose estimate is missing or invalid, records it, and holds nothing", async () => {
    const { engine, substrate, session } = await setup();
    const cases: [unknown, string][] = [
      [undefined, "policy_violation:missing_estimate"],
      [null, "policy_violation:missing_estimate"],
      [-1, "policy_violation:invalid_estimate"],
      [-0.000001, "policy_violation:invalid_estimate"],
      [Number.NaN, "policy_violation:invalid_estimate"],
      [Number.POSITIVE_INFINITY, "policy_violation:invalid_estimate"],
      ["abc", "policy_violation:invalid_estimate"],
      ["0x10", "policy_violation:invalid_estimate"],
      ["Infinity", "policy_violation:invalid_estimate"],
      ["-0.5", "policy_violation:invalid_estimate"],
      [" 0.5", "policy_violation:invalid_estimate"],
      ["1e99999", "policy_violation:invalid_estimate"],
      ["\ud800", "policy_violation:invalid_estimate"],
      [true, "policy_violation:invalid_estimate"],
      [{}, "policy_violation:invalid_estimate"],
      [[0.1], "policy_violation:invalid_estimate"],
      [10n, "policy_violation:invalid_estimate"],
    ];
    for (const [estimate, reason] of cases) {
      const s = await session({ budget_usd: 1 });
      const request = { session_id: s, tool_name: "pay", nonce: 1 } as EvaluateRequest;
      if (estimate !== undefined) (request as Record<string, unknown>).estimated_cost_usd = estimate;
      const r = await engine.evaluate(request);
      expect([String(estimate), r.verdict, r.reason, r.reservation_id, r.budget_remaining_usd]).toEqual([
        String(estimate),
        "DENY",
        reason,
        null,
        "1",
      ]);
      const entry = (await readChain(substrate)).at(-1)!;
      expect(dataOf(entry)).toMatchObject({ verdict: "DENY", reason, estimate_usd: null });
      expect(String(dataOf(entry).input_problem)).toMatch(/estimate/);
      const view = await engine.getSession(s);
      expect([view.budget_remaining_usd, view.state.circuit_tripped]).toEqual(["1", true]);
    }
    expect(
      (await verifyChain(await readChain(substrate), { publicKeys: [KEY.signer.publicKeyHex] })).ok,
    ).toBe(true);
  });

  it("lets the higher rules speak first, and asks no estimate of a session without a budget", async () => {
    const { engine, session } = await setup();
    const s = await session({ budget_usd: 1 });
    await engine.evaluate({ session_id: s, tool_name: "t", nonce: 1, estimated_cost_usd: 0.1 });
    // A replayed nonce is a replay whatever its estimate; then the circuit is open.
    expect((await engine.evaluate({ session_id: s, tool_name: "t", nonce: 1 })).reason).toBe(
      "policy_violation:duplicate_nonce",
    );
    expect((await engine.evaluate({ session_id: s, tool_name: "t", nonce: 2 })).reason).toBe("circuit_open");
    // HITL-always still needs an estimate before a human is asked.
    const hitl = await session({ budget_usd: 1, hitl_mode: "always" });
    expect((await engine.evaluate({ session_id: hitl, tool_name: "t" })).reason).toBe(
      "policy_violation:missing_estimate",
    );
    expect(
      (
        await engine.evaluate({
          session_id: await session({ budget_usd: 1, hitl_mode: "always" }),
          tool_name: "t",
          estimated_cost_usd: "0.1",
        })
      ).reason,
    ).toBe("hitl_all_calls");
    const free = await session({});
    const r = await engine.evaluate({ session_id: free, tool_name: "t" });
    expect([r.verdict, r.estimate_usd, r.budget_remaining_usd]).toEqual(["ALLOW", null, null]);
  });

  it("holds a call without an estimate at its tool's default, else the session's default", async () => {
    const { engine, session } = await setup();
    const s = await session({
      budget_usd: 1,
      default_estimate_usd: "0.25",
      tool_estimates_usd: { search: 0.1, fetch: "0.000000000000000001" },
    });
    const held = async (request: Omit<EvaluateRequest, "session_id">) => {
      const r = await engine.evaluate({ session_id: s, ...request });
      return [r.verdict, r.estimate_usd, r.budget_remaining_usd];
    };
    expect(await held({ tool_name: "search" })).toEqual(["ALLOW", "0.1", "0.9"]);
    expect(await held({ tool_name: "fetch", estimated_cost_usd: null })).toEqual([
      "ALLOW",
      "0.000000000000000001",
      "0.899999999999999999",
    ]);
    // An own-property lookup: a tool named after an Object.prototype member gets the default.
    expect(await held({ tool_name: "constructor" })).toEqual(["ALLOW", "0.25", "0.649999999999999999"]);
    expect(await held({ tool_name: "search", estimated_cost_usd: "0.05" })).toEqual([
      "ALLOW",
      "0.05",
      "0.599999999999999999",
    ]);
    // A bad estimate of the call's own is never replaced by a default.
    const bad = await engine.evaluate({ session_id: s, tool_name: "search", estimated_cost_usd: -1 });
    expect([bad.verdict, bad.reason]).toEqual(["DENY", "policy_violation:invalid_estimate"]);
  });

  it("reads an estimate given as text exactly, never through a float", async () => {
    const { engine, session } = await setup();
    const over = await session({ budget_usd: 1 });
    const r1 = await engine.evaluate({
      session_id: over,
      tool_name: "t",
      estimated_cost_usd: "1.0000000000000000000000001",
    });
    expect([r1.verdict, r1.reason, r1.budget_remaining_usd]).toEqual(["DENY", "budget_overrun", "1"]);
    const exact = await session({ budget_usd: 1 });
    const r2 = await engine.evaluate({ session_id: exact, tool_name: "t", estimated_cost_usd: "1" });
    expect([r2.verdict, r2.budget_remaining_usd]).toEqual(["ALLOW", "0"]);
    // Ten holds of "0.1" use up $1 exactly; an eleventh finds nothing left.
    const tenth = await session({ budget_usd: 1 });
    for (let i = 0; i < 10; i++) {
      expect(
        (await engine.evaluate({ session_id: tenth, tool_name: `t${i}`, estimated_cost_usd: "0.1" })).verdict,
      ).toBe("ALLOW");
    }
    expect((await engine.getSession(tenth)).budget_remaining_usd).toBe("0");
    // Beyond the money's 18 places a hold is rounded up, never down to nothing; beyond its range
    // an estimate is more than any budget.
    const tiny = await session({ budget_usd: 1 });
    const r3 = await engine.evaluate({ session_id: tiny, tool_name: "t", estimated_cost_usd: "1e-30" });
    expect([r3.verdict, r3.estimate_usd, r3.budget_remaining_usd]).toEqual([
      "ALLOW",
      "0.000000000000000001",
      "0.999999999999999999",
    ]);
    for (const huge of ["1e30", 1e300, "123456789012345678901234567890.5"]) {
      const s = await session({ budget_usd: 1 });
      const r = await engine.evaluate({ session_id: s, tool_name: "t", estimated_cost_usd: huge });
      expect([r.verdict, r.reason, r.budget_remaining_usd]).toEqual(["DENY", "budget_overrun", "1"]);
    }
  });

  it("refuses a config whose default estimates are not exact non-negative amounts", async () => {
    const { engine } = await setup();
    for (const config of [
      { budget_usd: 1, default_estimate_usd: "abc" },
      { budget_usd: 1, default_estimate_usd: -1 },
      { budget_usd: 1, default_estimate_usd: "-0.1" },
      { budget_usd: 1, tool_estimates_usd: { search: "0x1" } },
      { budget_usd: 1, tool_estimates_usd: { search: null } },
      { budget_usd: 1, tool_estimates_usd: [0.1] },
    ]) {
      const error = await engine.register({ agent_id: "bot", config: config as Config }).then(
        () => expect.fail(`accepted ${JSON.stringify(config)}`),
        (e: unknown) => e,
      );
      expect(LeashError.isInstance(error) && error.code).toBe("config_invalid");
      expect((error as Error).message).toMatch(/\/config\/(default_estimate_usd|tool_estimates_usd)/);
    }
  });

  it("denies malformed tool names and nonces as malformed input, recorded in a chain that verifies", async () => {
    const { engine, substrate, session } = await setup();
    const cases: Record<string, unknown>[] = [
      { tool_name: 5 },
      { tool_name: "" },
      { tool_name: undefined },
      { tool_name: null },
      { tool_name: { name: "t" } },
      { tool_name: "send\ud800" },
      { tool_name: "\udfffsend" },
      { tool_name: "t", nonce: Number.NaN },
      { tool_name: "t", nonce: Number.NEGATIVE_INFINITY },
      { tool_name: "t", nonce: "n\udc00" },
      { tool_name: "t", nonce: { n: 1 } },
      { tool_name: "t", nonce: true },
    ];
    for (const budget of [{ budget_usd: 1 }, {}]) {
      for (const fields of cases) {
        const s = await session(budget);
        const r = await engine.evaluate({
          session_id: s,
          estimated_cost_usd: 0.1,
          ...fields,
        } as EvaluateRequest);
        expect([r.verdict, r.reason, r.reservation_id]).toEqual([
          "DENY",
          "policy_violation:malformed_input",
          null,
        ]);
        const data = dataOf((await readChain(substrate)).at(-1)!);
        expect(data).toMatchObject({ verdict: "DENY", reason: "policy_violation:malformed_input" });
        expect(String(data.input_problem)).toMatch(/^(tool_name|nonce) /);
        expect((await engine.getSession(s)).state.circuit_tripped).toBe(true);
      }
    }
    // A well-formed pair of surrogates is fine.
    const s = await session({ budget_usd: 1 });
    const ok = await engine.evaluate({
      session_id: s,
      tool_name: "send 😀",
      nonce: "😀",
      estimated_cost_usd: 0.1,
    });
    expect(ok.verdict).toBe("ALLOW");
    expect(
      (await verifyChain(await readChain(substrate), { publicKeys: [KEY.signer.publicKeyHex] })).ok,
    ).toBe(true);
    const error = await engine.evaluate(null as never).then(
      () => expect.fail("accepted a null request"),
      (e: unknown) => e,
    );
    expect(LeashError.isInstance(error) && error.code).toBe("invalid_argument");
  });

  it("guard() without an estimate uses the session's default, and is denied without one", async () => {
    const { engine, session } = await setup();
    const withDefault = await session({ budget_usd: 1, tool_estimates_usd: { lookup: "0.2" } });
    let runs = 0;
    const lookup = guard(engine, { session_id: withDefault, tool_name: "lookup" }, async () => ++runs);
    await lookup();
    // Held at 0.2 and, with no cost function, settled at it.
    expect((await engine.getSession(withDefault)).budget_remaining_usd).toBe("0.8");
    const without = await session({ budget_usd: 1 });
    const other = guard(engine, { session_id: without, tool_name: "lookup" }, async () => ++runs);
    const error = await other().then(
      () => expect.fail("ran without an estimate"),
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(LeashDenied);
    expect((error as LeashDenied).reason).toBe("policy_violation:missing_estimate");
    expect(runs).toBe(1);
  });
});
