// replayChain() over holds that expired unsettled: each settled_by_expiry entry is re-derived (the
// estimate stays spent), a late post-exec corrects it, and older reservation_expired chains still fold.
import { appendEntry, generateKeyPair } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { createEngine } from "@leash/engine";
import { afterEach, describe, expect, it } from "vitest";
import { compareSnapshots, replayChain } from "../src/index.js";
import { KINDS, type Kind, manualClock, openStore, type TestStore } from "./support.js";

let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

const readChain = (substrate: Substrate): Promise<ChainEntryRecord[]> =>
  substrate.transaction((tx) => tx.chain.range(0, 1_000_000));

async function expiredChain(kind: Kind) {
  store = await openStore(kind);
  const clock = manualClock();
  const key = generateKeyPair();
  const engine = createEngine({
    substrate: store.substrate,
    signer: key.signer,
    clock,
    reservationTtlMs: 1000,
  });
  const { session_id } = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
  const call = (tool: string, estimate: number) =>
    engine.evaluate({ session_id, tool_name: tool, nonce: tool, estimated_cost_usd: estimate });
  await call("a", 0.6);
  clock.advanceMs(2000);
  await engine.expireReservations();
  await engine.postExec({ session_id, call_number: 1, actual_cost_usd: "0.25" });
  await call("b", 0.3);
  clock.advanceMs(2000);
  await engine.expireReservations();
  return { engine, key, clock, session_id, substrate: store.substrate };
}

describe.each(KINDS)("replayChain over expired holds on %s", (kind: Kind) => {
  it("re-derives settled_by_expiry and the late correction; the tables agree with the fold", async () => {
    const { engine, substrate, session_id } = await expiredChain(kind);
    expect((await engine.getSession(session_id)).budget_remaining_usd).toBe("0.45");
    const entries = await readChain(substrate);
    const result = await replayChain(entries);
    expect(result.mismatch).toBeNull();
    expect(result.kinds.settled_by_expiry).toBe(2);
    expect(result.kinds.post_exec).toBe(1);
    expect(await compareSnapshots(substrate, result.projection)).toEqual([]);
  });
});

describe("replayChain finds an expiry that does not follow", () => {
  it("a settled_by_expiry that claims the budget got its hold back", async () => {
    const { key, clock, substrate } = await expiredChain("memory");
    const { session_id: other } = await createEngine({ substrate, signer: key.signer, clock }).register({
      agent_id: "bot",
      config: { budget_usd: 1 },
    });
    const engine = createEngine({ substrate, signer: key.signer, clock, reservationTtlMs: 1000 });
    await engine.evaluate({ session_id: other, tool_name: "t", nonce: "t", estimated_cost_usd: 0.5 });
    clock.advanceMs(2000);
    const index = (await readChain(substrate)).length;
    await substrate.transaction((tx) =>
      appendEntry(tx, {
        kind: "settled_by_expiry",
        data: {
          session_id: other,
          call_number: 1,
          reservation_id: `${other}#1`,
          charged_usd: "0.5",
          budget_after_usd: "1",
        } as never,
        signer: key.signer,
        nowNs: clock.nowNs(),
      }),
    );
    const result = await replayChain(await readChain(substrate));
    expect(result.ok).toBe(false);
    expect(result.mismatch).toMatchObject({
      index,
      field: "budget_after_usd",
      expected: "0.5",
      recorded: "1",
    });
  });

  it("an older chain's reservation_expired still folds as a release", async () => {
    store = await openStore("memory");
    const clock = manualClock();
    const key = generateKeyPair();
    const engine = createEngine({
      substrate: store.substrate,
      signer: key.signer,
      clock,
      reservationTtlMs: 1000,
    });
    const { session_id } = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    await engine.evaluate({ session_id, tool_name: "t", nonce: "t", estimated_cost_usd: 0.4 });
    clock.advanceMs(2000);
    // What an engine before settled_by_expiry wrote: the hold given back.
    await store.substrate.transaction((tx) =>
      appendEntry(tx, {
        kind: "reservation_expired",
        data: { session_id, call_number: 1, reservation_id: `${session_id}#1`, released_usd: "0.4" } as never,
        signer: key.signer,
        nowNs: clock.nowNs(),
      }),
    );
    const result = await replayChain(await readChain(store.substrate));
    expect(result.mismatch).toBeNull();
    const hold = result.projection.ledger.reservations.get(`${session_id}#1`);
    expect(hold).toMatchObject({ status: "EXPIRED", actual_usd: null });
    const account = [...result.projection.ledger.accounts.values()][0];
    expect(account).toMatchObject({ spent_usd: "0", reserved_usd: "0" });
  });
});
