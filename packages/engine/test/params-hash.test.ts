// The caller's params digest (a daemon's tool_params_hash) against the engine's own, on every real store.
// A mismatch is a recorded DENY that leaves the circuit as it was; a match decides as if none were given.
import { generateKeyPair, verifyChain } from "@leash/chain";
import { canonicalHash } from "@leash/core";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();

describe.each(KINDS)("expected_params_hash on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it("a digest that is not the params' own is DENY policy_violation:params_hash_mismatch, recorded, circuit closed", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    await engine.register({ agent_id: "a", session_id: "s", config: { budget_usd: 1 } });
    const params = { q: "x" };
    const wrong = canonicalHash({ q: "y" });
    const denied = await engine.evaluate({
      session_id: "s",
      tool_name: "t",
      params,
      expected_params_hash: wrong,
      estimated_cost_usd: 0.1,
    });
    expect([denied.verdict, denied.reason]).toEqual(["DENY", "policy_violation:params_hash_mismatch"]);
    expect(denied.reservation_id).toBeNull();
    expect(denied.budget_remaining_usd).toBe("1");
    const view = await engine.getSession("s");
    expect(view.state.circuit_tripped).toBe(false);
    expect(view.call_count).toBe(1);

    const allowed = await engine.evaluate({
      session_id: "s",
      tool_name: "t",
      params,
      expected_params_hash: canonicalHash(params),
      estimated_cost_usd: 0.1,
    });
    expect([allowed.verdict, allowed.reason, allowed.call_number]).toEqual(["ALLOW", "within_thresholds", 2]);
    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 100));
    const reasons = entries.filter((e) => e.kind === "decision").map((e) => JSON.parse(e.body).data.reason);
    expect(reasons).toEqual(["policy_violation:params_hash_mismatch", "within_thresholds"]);
    expect((await verifyChain(entries, { publicKeys: [KEY.publicKeyHex] })).ok).toBe(true);
  });
});
