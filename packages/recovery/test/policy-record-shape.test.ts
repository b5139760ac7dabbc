// The policy record's shapes in decision entries: engines write it compact (no `hash`, no empty lists,
// none at all for a quiet default ALLOW, only `counted` for one that counted), and chains in the older
// shapes (the full record, `counter_updates` in full) still check and replay.
import { appendEntry, checkEventData, generateKeyPair, type Json, parseEntryBody } from "@leash/chain";
import type { ChainEntryRecord } from "@leash/core";
import { countedCallOf, createEngine, type StoredPolicyRecord, updatesOf } from "@leash/engine";
import { loadPolicy } from "@leash/policy";
import { afterEach, expect, it } from "vitest";
import { replayChain } from "../src/index.js";
import { manualClock, openStore, type TestStore } from "./support.js";

const KEY = generateKeyPair();
const POLICY = loadPolicy({
  version: 1,
  name: "shapes",
  rules: [
    { name: "no-drop", match: { tool: "db.drop" }, action: "deny", message: "no" },
    {
      name: "search-rate",
      match: { tool: "search" },
      action: { rate: { limit: 2, window_s: 60, per: "agent" } },
    },
    { name: "shadow", match: { tool: "fs.delete" }, action: "deny", message: "no", mode: "monitor" },
  ],
});

let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

type Data = Record<string, unknown>;
const bodyOf = (e: ChainEntryRecord) =>
  parseEntryBody(e.body) as { kind: string; data: Data; chain_id: string; timestamp_ns: string };

/** Every entry after the first re-signed with `edit(data)` applied to its decisions (an honest signer). */
async function rewritten(chain: readonly ChainEntryRecord[], edit: (data: Data) => Data) {
  const mem = await openStore("memory");
  try {
    await mem.substrate.transaction((tx) => tx.chain.append(chain[0]!));
    for (const entry of chain.slice(1)) {
      const { kind, data, chain_id, timestamp_ns } = bodyOf(entry);
      await mem.substrate.transaction((tx) =>
        appendEntry(tx, {
          kind,
          data: (kind === "decision" ? edit(data) : data) as Record<string, Json>,
          signer: KEY.signer,
          nowNs: Number(timestamp_ns),
          chainId: chain_id,
        }),
      );
    }
    return await mem.substrate.transaction((tx) => tx.chain.range(0, 10_000));
  } finally {
    await mem.close();
  }
}

/**
 * A decision as engines wrote it before the compact record: the full record, `hash` included, and the
 * counter updates in full (`counter_updates`, not `counted`).
 */
function fullShape(data: Data): Data {
  if (typeof data.policy_hash !== "string") return data;
  const compact = data.policy as StoredPolicyRecord | null | undefined;
  if (compact != null && compact.counted !== undefined) {
    const { counted: _, ...rest } = compact;
    const counter_updates = updatesOf(compact, POLICY, countedCallOf(data, Number(data.now_ns)));
    const full = { verdict: "ALLOW", rule: null, reason: "policy_allow:default", ...rest, counter_updates };
    return { ...data, policy: { hash: data.policy_hash, monitor: [], ...full } };
  }
  if (!Object.hasOwn(data, "policy")) {
    const policy = {
      verdict: "ALLOW",
      rule: null,
      reason: "policy_allow:default",
      monitor: [],
      counter_updates: [],
    };
    return { ...data, policy: { hash: data.policy_hash, ...policy } };
  }
  const p = data.policy as Data | null;
  if (p === null) return data;
  return { ...data, policy: { hash: data.policy_hash, monitor: [], counter_updates: [], ...p } };
}

it("writes the record compact, and a chain in the older full shape still checks and replays", async () => {
  store = await openStore("memory");
  const engine = createEngine({
    substrate: store.substrate,
    signer: KEY.signer,
    clock: manualClock(),
    policy: POLICY,
  });
  await engine.register({ agent_id: "bot", session_id: "s", config: { denied_tools: ["rm"] } });
  const call = (tool_name: string, nonce: string) =>
    engine.evaluate({ session_id: "s", tool_name, params: { n: nonce }, nonce });
  const verdicts = [];
  for (const [tool, nonce] of [
    ["fs.read", "1"],
    ["db.drop", "2"],
    ["search", "3"],
    ["fs.delete", "4"],
    ["rm", "5"],
  ] as const) {
    verdicts.push((await call(tool, nonce)).verdict);
  }
  expect(verdicts).toEqual(["ALLOW", "DENY", "ALLOW", "ALLOW", "DENY"]);
  const chain = await store.substrate.transaction((tx) => tx.chain.range(0, 10_000));
  const decisions = chain.filter((e) => e.kind === "decision").map((e) => bodyOf(e).data);
  expect(decisions.every((d) => d.policy_hash === POLICY.hash)).toBe(true);
  // A default ALLOW with nothing to say: the version alone. Refused before the policy ran: null.
  expect(Object.hasOwn(decisions[0]!, "policy")).toBe(false);
  expect(decisions[4]!.policy).toBeNull();
  expect(decisions.slice(1, 4).map((d) => d.policy)).toEqual([
    { verdict: "DENY", rule: "no-drop", reason: "policy_violation:rule:no-drop" },
    // A default ALLOW that counted: only what (rule 1, the rate limit; its key and window follow).
    { counted: [1] },
    {
      verdict: "ALLOW",
      rule: null,
      reason: "policy_allow:default",
      monitor: [{ rule: "shadow", would: "DENY rule:shadow", reason: "policy_violation:rule:shadow" }],
    },
  ]);
  for (const d of decisions) expect(checkEventData("decision", d)).toBeNull();
  expect((await replayChain(chain)).mismatch).toBeNull();

  // The same chain in the full shape: valid, and it replays.
  const old = await rewritten(chain, fullShape);
  const oldDecisions = old.filter((e) => e.kind === "decision").map((e) => bodyOf(e).data);
  expect((oldDecisions[0]!.policy as Data).hash).toBe(POLICY.hash);
  for (const d of oldDecisions) expect(checkEventData("decision", d)).toBeNull();
  const replayed = await replayChain(old);
  expect(replayed.mismatch).toBeNull();
  expect(replayed.verdicts_checked).toBe(5);
  // What replay still compares: an old record naming another version, a null for a default ALLOW,
  // a record dropped from a rule's DENY.
  const other = "0".repeat(64);
  const misnamed = await rewritten(chain, (d) => {
    const full = fullShape(d);
    return full.policy === null ? full : { ...full, policy: { ...(full.policy as Data), hash: other } };
  });
  expect((await replayChain(misnamed)).mismatch).toMatchObject({ field: "policy.hash", recorded: other });
  const nulled = await rewritten(chain, (d) => (Object.hasOwn(d, "policy") ? d : { ...d, policy: null }));
  expect((await replayChain(nulled)).mismatch).toMatchObject({ field: "policy", recorded: null });
  const dropped = await rewritten(chain, (d) => {
    if (d.reason !== "policy_violation:rule:no-drop") return d;
    const { policy: _, ...rest } = d;
    return rest;
  });
  expect((await replayChain(dropped)).mismatch).toMatchObject({ field: "policy" });
}, 30_000);
