// Recovery and budget escrow: a dead shard's allotment returns after its lease, charged with what it
// recorded; the snapshot check counts allotments in; a broken invariant is a problem (fail closed).
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import { createEngine, withEscrow } from "@leash/engine";
import { afterEach, describe, expect, it } from "vitest";
import { fileCheckpointStore, recover } from "../src/index.js";
import { manualClock, openStore, SQL_KINDS, type TestStore } from "./support.js";

const KEY = generateKeyPair();
const ORG = "org:acme";
let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

describe.each(SQL_KINDS)("%s: recovery with budget escrow", (kind) => {
  it("returns a dead shard's allotment after its lease, charged with its spending; checks the invariant", async () => {
    store = await openStore(kind);
    const clock = manualClock();
    const leaseEnd = clock.nowNs() + 10e9;
    const shard = withEscrow(store.substrate, {
      shard: 7,
      holder: "daemon-dead",
      epoch: 1,
      leaseExpiresNs: () => leaseEnd,
      nowNs: () => clock.nowNs(),
      intervalMs: 0,
    });
    const engine = createEngine({ substrate: shard, signer: KEY.signer, clock });
    const config = { budget_usd: 5, budget_scope: "organization" as const };
    const session = await engine.register({ agent_id: "bot", organization_id: "acme", config });
    for (let i = 0; i < 4; i++) {
      const r = await engine.evaluate({
        session_id: session.session_id,
        tool_name: "t",
        params: { i },
        nonce: `n${i}`,
        estimated_cost_usd: 0.1,
      });
      expect(r.verdict).toBe("ALLOW");
      await engine.postExec({
        session_id: session.session_id,
        call_number: r.call_number,
        actual_cost_usd: 0.05,
      });
    }
    const held = await store.substrate.transaction(async (tx) => tx.allotments!.listAll());
    expect(held.map((r) => [r.shard, r.spent_usd])).toEqual([["7", "0.2"]]);
    // The daemon dies: no release. Its allotment stays until the lease is over.
    const options = {
      publicKeys: [KEY.publicKeyHex],
      signer: KEY.signer,
      checkpointStore: fileCheckpointStore(join(store.dir, "checkpoint.json")),
      repair: true,
      clock,
      // Not yet: replay re-derives a decision's budget from the global ledger, while an escrowed shard
      // decided on its allotment (budget_before_usd is the allotment's headroom): see docs "Escrow".
      checkSnapshots: false,
    };
    const early = await recover(store.substrate, options);
    expect(early.problems).toEqual([]);
    expect(early.escrow).toMatchObject({ accounts: 1, allotments: 1, violations: [], reclaimed: [] });

    clock.advanceMs(11_000);
    const late = await recover(store.substrate, options);
    expect(late.problems).toEqual([]);
    expect(late.escrow.reclaimed).toEqual([{ account_id: ORG, shard: "7", charged_usd: "0.2" }]);
    const after = await store.substrate.transaction(async (tx) => ({
      account: await tx.budgets.getAccount(ORG),
      rows: await tx.allotments!.list(ORG),
    }));
    expect(after.rows).toEqual([]);
    expect(after.account?.spent_usd).toBe("0.2");
    const again = await recover(store.substrate, options);
    expect(again.ok).toBe(true);

    // An allotment beyond the limit (written by hand) is a problem: recovery refuses the store.
    await store.substrate.transaction((tx) =>
      tx.allotments!.put({
        account_id: ORG,
        shard: "9",
        holder: "x",
        epoch: 1,
        granted_usd: "4.9",
        spent_usd: "0",
        reserved_usd: "0",
        lease_expires_ns: leaseEnd * 2,
        created_ns: 0,
        updated_ns: 0,
        at_seq: null,
      }),
    );
    const broken = await recover(store.substrate, options);
    expect(broken.ok).toBe(false);
    expect(broken.problems.map((p) => p.code)).toContain("escrow_violation");
  });
});
