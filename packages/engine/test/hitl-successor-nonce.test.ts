// answerHitl's successorNonce: a caller whose wire carries uint64 nonces (the daemon) names a modify's
// successor nonce itself; the named nonce is the one released, and it is refused where it makes no sense.
import { generateKeyPair } from "@leash/chain";
import { manualClock } from "@leash/test-stores";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();

describe.each(KINDS)("answerHitl successorNonce on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it("releases exactly the named successor nonce, and is refused for other decisions and bad values", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, clock: manualClock() });
    const s = await engine.register({ agent_id: "bot", config: { hitl_mode: "always" } });
    const paused = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "pay",
      params: { a: 1 },
      nonce: "7",
    });
    const id = paused.hitl_request_id!;
    await expect(
      engine.answerHitl(id, { decision: "approve", operatorId: "op", successorNonce: "9" }),
    ).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(
      engine.answerHitl(id, { decision: "modify", operatorId: "op", params: { a: 2 }, successorNonce: "" }),
    ).rejects.toMatchObject({ code: "invalid_argument" });
    expect((await engine.getHitl(id)).status).toBe("pending");
    const answered = await engine.answerHitl(id, {
      decision: "modify",
      operatorId: "op",
      params: { a: 2 },
      successorNonce: "123456789",
    });
    expect(answered.successor?.nonce).toBe("123456789");
    const run = await engine.evaluate({
      session_id: s.session_id,
      tool_name: "pay",
      params: { a: 2 },
      nonce: "123456789",
    });
    expect([run.verdict, run.reason]).toEqual(["ALLOW", "hitl_transition:modify_successor"]);
  });
});
