// The guard config's denied_tools on every real store: a call to a listed tool is a recorded, signed DENY
// policy_violation:tool_denied that counts as a call and leaves the circuit closed for the other tools.
import { generateKeyPair, verifyChain } from "@leash/chain";
import { verifyReceipt } from "@leash/receipts";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, LeashError } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();

describe.each(KINDS)("denied_tools on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it("denies a listed tool with a receipt, before any estimate or HITL, without tripping the circuit", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    // A budget without a default estimate: the denial outranks the missing estimate.
    await engine.register({
      agent_id: "a",
      session_id: "s",
      config: { budget_usd: 1, denied_tools: ["delete_all", "drop_db"] },
    });
    const denied = await engine.evaluate({ session_id: "s", tool_name: "delete_all", params: { path: "/" } });
    expect([denied.verdict, denied.reason, denied.call_number]).toEqual([
      "DENY",
      "policy_violation:tool_denied",
      1,
    ]);
    expect(denied.reservation_id).toBeNull();
    expect(denied.budget_remaining_usd).toBe("1");
    const checked = await verifyReceipt(denied.receipt, KEY.publicKeyHex);
    expect(checked.ok && checked.payload.data.reason).toBe("policy_violation:tool_denied");
    let view = await engine.getSession("s");
    expect([view.state.circuit_tripped, view.call_count, view.status]).toEqual([false, 1, "ACTIVE"]);
    expect(await engine.listHitl({ sessionId: "s" })).toEqual([]);

    // Other tools go on; the same denied call again is denied again (its nonce was never recorded).
    const allowed = await engine.evaluate({
      session_id: "s",
      tool_name: "search",
      params: { q: "x" },
      nonce: "n1",
      estimated_cost_usd: "0.25",
    });
    expect([allowed.verdict, allowed.reason, allowed.call_number]).toEqual(["ALLOW", "within_thresholds", 2]);
    const again = await engine.evaluate({ session_id: "s", tool_name: "drop_db", nonce: "n2" });
    expect([again.verdict, again.reason, again.call_number]).toEqual([
      "DENY",
      "policy_violation:tool_denied",
      3,
    ]);
    view = await engine.getSession("s");
    expect([view.state.circuit_tripped, view.call_count, view.budget_remaining_usd]).toEqual([
      false,
      3,
      "0.75",
    ]);

    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 100));
    const decisions = entries.filter((e) => e.kind === "decision").map((e) => JSON.parse(e.body).data);
    expect(decisions.map((d) => [d.tool_name, d.verdict, d.reason])).toEqual([
      ["delete_all", "DENY", "policy_violation:tool_denied"],
      ["search", "ALLOW", "within_thresholds"],
      ["drop_db", "DENY", "policy_violation:tool_denied"],
    ]);
    expect((await verifyChain(entries, { publicKeys: [KEY.publicKeyHex] })).ok).toBe(true);
  });

  it("denies a listed tool where decide() would ask a human: no HITL request is opened", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    await engine.register({
      agent_id: "a",
      session_id: "h",
      config: { hitl_mode: "always", denied_tools: ["delete_all"] },
    });
    const denied = await engine.evaluate({ session_id: "h", tool_name: "delete_all", nonce: "1" });
    expect([denied.verdict, denied.reason]).toEqual(["DENY", "policy_violation:tool_denied"]);
    expect(await engine.listHitl({ sessionId: "h" })).toEqual([]);
    const paused = await engine.evaluate({ session_id: "h", tool_name: "search", nonce: "2" });
    expect([paused.verdict, paused.reason]).toEqual(["HITL", "hitl_all_calls"]);
  });

  it("keeps decide()'s own DENY: an open circuit stays circuit_open for a denied tool too", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    await engine.register({ agent_id: "a", session_id: "s", config: { denied_tools: ["delete_all"] } });
    await engine.evaluate({ session_id: "s", tool_name: "t", nonce: "7" });
    const replayed = await engine.evaluate({ session_id: "s", tool_name: "t", nonce: "7" });
    expect(replayed.reason).toBe("policy_violation:duplicate_nonce");
    const denied = await engine.evaluate({ session_id: "s", tool_name: "delete_all", nonce: "8" });
    expect([denied.verdict, denied.reason]).toEqual(["DENY", "circuit_open"]);
  });

  it("refuses a denied_tools that is not a list of distinct non-empty names, registering nothing", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    for (const denied_tools of ["delete_all", [""], ["a", "a"], [1]]) {
      await expect(
        engine.register({
          agent_id: "a",
          config: { denied_tools } as unknown as Parameters<typeof engine.register>[0]["config"],
        }),
      ).rejects.toSatisfy(
        (error) => LeashError.isInstance(error) && /denied_tools/.test((error as Error).message),
      );
    }
    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 100));
    expect(entries).toEqual([]);
  });
});
