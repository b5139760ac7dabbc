// replayChain() over params stored by digest: re-derives verdicts from the stored text after checking it against
// the signed digest; a text missing or altered in the store is the mismatch; an export carries them and replays alone.
import { fromJsonl, generateKeyPair, toJsonl } from "@leash/chain";
import type { ChainEntryRecord, Substrate } from "@leash/core";
import { afterEach, describe, expect, it } from "vitest";
import { compareSnapshots, replayChain, storedParams } from "../src/index.js";
import { KINDS, type Kind, manualClock, openStore, SQL_KINDS, type TestStore } from "./support.js";
import { workloadEngine } from "./workload.js";

let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

const readChain = (substrate: Substrate): Promise<ChainEntryRecord[]> =>
  substrate.transaction((tx) => tx.chain.range(0, 1_000_000));

/** A session whose calls carry the same 5 KB params (stored once) and small ones (inline). */
async function chainWithStoredParams(kind: Kind): Promise<TestStore> {
  const opened = await openStore(kind);
  const clock = manualClock();
  const engine = workloadEngine(opened.substrate, clock, generateKeyPair().signer);
  const { session_id } = await engine.register({
    agent_id: "a",
    config: { budget_usd: 1, max_repeat_calls: 2 },
  });
  const big = { doc: "p".repeat(5000) };
  const reasons: string[] = [];
  for (const [params, nonce] of [
    [big, "1"],
    [{ q: 1 }, "2"],
    [big, "3"],
    [big, "4"],
    [big, "5"],
  ] as const) {
    const call = { session_id, tool_name: "t", params, nonce, estimated_cost_usd: "0.01" };
    reasons.push((await engine.evaluate(call)).reason);
  }
  expect(reasons.slice(0, 3)).toEqual(["within_thresholds", "within_thresholds", "within_thresholds"]);
  return opened;
}

describe.each(KINDS)("replayChain over params stored by digest on %s", (kind: Kind) => {
  it("re-derives every verdict from the stored params, and needs them", async () => {
    store = await chainWithStoredParams(kind);
    const entries = await readChain(store.substrate);
    expect(entries.filter((e) => e.body.includes('"params_blob":true'))).toHaveLength(4);
    const result = await replayChain(entries, { params: storedParams(store.substrate) });
    expect(result.mismatch).toBeNull();
    expect(result.verdicts_checked).toBe(5);
    expect(await compareSnapshots(store.substrate, result.projection)).toEqual([]);
    // Without the store's params the first call that stored them cannot be decided again.
    expect((await replayChain(entries)).mismatch).toMatchObject({ field: "params_blob", recorded: null });
  }, 30_000);

  it("an export carries the stored params: the file replays without the store", async () => {
    store = await chainWithStoredParams(kind);
    const substrate = store.substrate;
    const lines: string[] = [];
    const params = (hashes: readonly string[]) => substrate.transaction((tx) => tx.chain.params(hashes));
    for await (const line of toJsonl(await readChain(substrate), { params })) lines.push(line);
    expect(lines.filter((l) => l.includes('"params":{"hash"'))).toHaveLength(4);
    const back = lines.map((l) => fromJsonl(l.trimEnd()));
    expect((await replayChain(back)).mismatch).toBeNull();
  }, 30_000);
});

describe.each(SQL_KINDS)("stored params altered behind the engine's back on %s", (kind: Kind) => {
  it("is the mismatch: the text no longer hashes to the digest the entry signed", async () => {
    store = await chainWithStoredParams(kind);
    await store.sql(`UPDATE leash_params SET text = '{"doc":"forged"}'`);
    const result = await replayChain(await readChain(store.substrate), {
      params: storedParams(store.substrate),
    });
    expect(result.mismatch).toMatchObject({ field: "params_hash" });
    // The export leaves altered params out rather than pass them on.
    const lines: string[] = [];
    const substrate = store.substrate;
    const params = (hashes: readonly string[]) => substrate.transaction((tx) => tx.chain.params(hashes));
    for await (const line of toJsonl(await readChain(substrate), { params })) lines.push(line);
    expect(lines.some((l) => l.includes("forged"))).toBe(false);
  }, 30_000);
});
