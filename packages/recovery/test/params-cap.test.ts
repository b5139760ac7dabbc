// replayChain() over the guard's max_params_bytes: a params_too_large DENY (recorded without its params) is
// re-derived from its recorded size; an entry that lies about it is found; entries before the cap existed still fold.
import { appendEntry, generateKeyPair, type Json, parseEntryBody } from "@leash/chain";
import { type ChainEntryRecord, canonicalJson, type Substrate } from "@leash/core";
import { afterEach, describe, expect, it } from "vitest";
import { compareSnapshots, replayChain } from "../src/index.js";
import { KINDS, type Kind, manualClock, openStore, type TestStore } from "./support.js";
import { workloadEngine } from "./workload.js";

let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

const readChain = (substrate: Substrate): Promise<ChainEntryRecord[]> =>
  substrate.transaction((tx) => tx.chain.range(0, 1_000_000));

/** `chain` with its last entry's data replaced by `edit(data)` and re-signed with `key` (an honest signer lying). */
async function resigned(
  chain: ChainEntryRecord[],
  edit: (data: Record<string, unknown>) => Record<string, unknown>,
  key: ReturnType<typeof generateKeyPair>,
): Promise<ChainEntryRecord[]> {
  const mem = await openStore("memory");
  try {
    for (const entry of chain.slice(0, -1)) await mem.substrate.transaction((tx) => tx.chain.append(entry));
    const last = parseEntryBody(chain.at(-1)!.body) as { data: Record<string, unknown>; chain_id: string };
    await mem.substrate.transaction((tx) =>
      appendEntry(tx, {
        kind: "decision",
        data: edit(last.data) as Record<string, Json>,
        signer: key.signer,
        nowNs: Number((last.data as { now_ns: number }).now_ns),
        chainId: last.chain_id,
      }),
    );
    return await readChain(mem.substrate);
  } finally {
    await mem.close();
  }
}

/** A decision's data as engines before the cap and the params store wrote it: replay inputs 2, params inline. */
function inlined(data: Record<string, unknown>): Record<string, unknown> {
  const { params_blob: _stored, ...rest } = data;
  return { ...rest, replay_inputs: 2, params_json: canonicalJson({ p: "q".repeat(300_000) }) };
}

describe.each(KINDS)("replayChain over max_params_bytes on %s", (kind: Kind) => {
  it("re-derives params_too_large from the recorded size and finds an entry that lies about it", async () => {
    store = await openStore(kind);
    const clock = manualClock();
    const key = generateKeyPair();
    const engine = workloadEngine(store.substrate, clock, key.signer);
    const { session_id } = await engine.register({
      agent_id: "a",
      config: { budget_usd: 1, max_params_bytes: 1000, max_repeat_calls: 3 },
    });
    const reasons: string[] = [];
    for (const [size, nonce] of [
      [10, "1"],
      [5000, "2"],
      [10, "3"],
    ] as const) {
      const call = {
        session_id,
        tool_name: "t",
        params: { p: "z".repeat(size) },
        nonce,
        estimated_cost_usd: "0.1",
      };
      reasons.push((await engine.evaluate(call)).reason);
    }
    expect(reasons).toEqual(["within_thresholds", "policy_violation:params_too_large", "within_thresholds"]);
    const honest = await readChain(store.substrate);
    const result = await replayChain(honest);
    expect(result.mismatch).toBeNull();
    expect(result.verdicts_checked).toBe(3);
    expect(await compareSnapshots(store.substrate, result.projection)).toEqual([]);

    // The oversized call re-signed as an ALLOW: replay derives the denial from the recorded size.
    const upTo = honest.slice(0, honest.findIndex((e) => e.body.includes("params_too_large")) + 1);
    const allowed = await resigned(
      upTo,
      (d) => ({ ...d, verdict: "ALLOW", reason: "within_thresholds" }),
      key,
    );
    expect((await replayChain(allowed)).mismatch).toMatchObject({ field: "verdict", expected: "DENY" });
    // A size under the cap recorded as too large does not follow either.
    const small = await resigned(upTo, (d) => ({ ...d, params_bytes: 12 }), key);
    expect((await replayChain(small)).mismatch).toMatchObject({ field: "params_bytes", recorded: 12 });
  }, 30_000);

  it("folds an entry written before the cap (replay inputs 2) with params over today's default", async () => {
    store = await openStore(kind);
    const clock = manualClock();
    const key = generateKeyPair();
    const engine = workloadEngine(store.substrate, clock, key.signer);
    const { session_id } = await engine.register({ agent_id: "a", config: { max_params_bytes: 400_000 } });
    const params = { p: "q".repeat(300_000) };
    expect((await engine.evaluate({ session_id, tool_name: "t", params })).verdict).toBe("ALLOW");
    const honest = await readChain(store.substrate);
    // The same chain as an older engine wrote it: no cap in the config, replay inputs 2.
    const mem = await openStore("memory");
    let old: ChainEntryRecord[];
    try {
      for (const entry of honest) {
        const body = parseEntryBody(entry.body) as { kind: string; data: Record<string, unknown> };
        const data =
          body.kind === "session_registered"
            ? { ...body.data, config: {} }
            : body.kind === "decision"
              ? inlined(body.data)
              : body.data;
        await mem.substrate.transaction((tx) =>
          appendEntry(tx, {
            kind: body.kind,
            data: data as Record<string, Json>,
            signer: key.signer,
            nowNs: clock.nowNs(),
          }),
        );
      }
      old = await readChain(mem.substrate);
    } finally {
      await mem.close();
    }
    expect(old.some((e) => e.body.includes('"params_json":"{'))).toBe(true);
    const result = await replayChain(old);
    expect(result.mismatch).toBeNull();
    expect(result.verdicts_checked).toBe(1);
  }, 30_000);
});
