// Tags and `session.denied` through the engine, on every real store: tags come from the policy's `tags:`
// (calls carry none on the wire), `session.denied` counts the session's calls not allowed; replay agrees.
import { generateKeyPair } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { loadPolicy } from "@leash/policy";
import { afterEach, describe, expect, it } from "vitest";
import { replayChain } from "../src/index.js";
import { KINDS, type Kind, manualClock, openStore, type TestStore } from "./support.js";

const KEY = generateKeyPair();
const POLICY = loadPolicy(`
version: 1
name: tagged
tags:
  payments: [wire_transfer, "refund_*"]
rules:
  - name: cool-down
    when: "session.denied >= 3"
    action: deny
    message: too many refused calls in this session
  - name: big-payments
    match: { tags: [payments] }
    when: "has(args.amount) && args.amount > 100"
    action: deny
    message: payments over 100 are refused
  - name: tagged-writes
    when: "'payments' in tags && tool.startsWith('refund_')"
    action: hitl
`);

describe.each(KINDS)("tags and session.denied on %s", (kind: Kind) => {
  let store: TestStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it("match.tags and `tags` see the policy's tool tags; session.denied counts refused and paused calls", async () => {
    store = await openStore(kind);
    const engine = createEngine({
      substrate: store.substrate,
      signer: KEY.signer,
      clock: manualClock(),
      policy: POLICY,
    });
    await engine.register({ agent_id: "bot", session_id: "s", config: {} });
    let n = 0;
    const call = async (tool_name: string, params: Record<string, unknown> = {}) => {
      const r = await engine.evaluate({
        session_id: "s",
        tool_name,
        params: { ...params, n: n++ },
        nonce: `n${n}`,
      });
      return r.reason;
    };
    expect(await call("wire_transfer", { amount: 50 })).not.toMatch(/^policy_/); // tagged, small: allowed
    expect(await call("wire_transfer", { amount: 500 })).toBe("policy_violation:rule:big-payments");
    expect(await call("search", { amount: 500 })).not.toMatch(/^policy_/); // not tagged payments
    expect(await call("refund_card", { amount: 5 })).toBe("policy_hitl:rule:tagged-writes");
    // Refused or paused so far: 2 (the big payment, the refund's pause); a third refusal, then the cool-down.
    expect(await call("refund_card", { amount: 500 })).toBe("policy_violation:rule:big-payments");
    expect(await call("search")).toBe("policy_violation:rule:cool-down");

    const chain = await store.substrate.transaction((tx) => tx.chain.range(0, 10_000));
    const replayed = await replayChain(chain);
    expect(replayed.mismatch).toBeNull();
    expect(replayed.verdicts_checked).toBe(6);
  }, 60_000);
});
