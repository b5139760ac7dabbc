// `leash verify` checks each entry's data against its kind's JSON Schema: an entry tampered with and
// re-signed with the chain's own key (so hashes, links and signatures all verify) fails on the schema alone.
import { buildEntry, generateKeyPair, type Json, toJsonl } from "@leash/chain";
import type { ChainEntryRecord } from "@leash/core";
import { createEngine } from "@leash/engine";
import { manualClock, openStore } from "@leash/test-stores";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { leash, scratchDir } from "./helpers.js";
import { STORE_KINDS, type TestStore, testStore } from "./stores.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());
const KEY = generateKeyPair();

interface Body {
  kind: string;
  timestamp_ns: string;
  data: Record<string, Json>;
}

/** The engine's chain on a real SQLite file: a register, an ALLOW, its post-exec, a reset. */
async function writtenChain(): Promise<Body[]> {
  const store = await openStore("sqlite", { label: "clischema" });
  try {
    const clock = manualClock();
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, clock });
    const { session_id } = await engine.register({ agent_id: "bot", config: { budget_usd: 5 } });
    await engine.evaluate({
      session_id,
      tool_name: "search",
      params: { q: 1 },
      nonce: 1,
      estimated_cost_usd: 1,
    });
    await engine.postExec({ session_id, call_number: 1, actual_cost_usd: 0.5 });
    await engine.reset(session_id, "alice");
    await engine.close();
    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 1000));
    return entries.map((e) => JSON.parse(e.body) as Body);
  } finally {
    await store.close();
  }
}

/** The chain re-signed with the chain's key, `edit` applied to entry `at` first. */
function resigned(bodies: Body[], at = -1, edit: (b: Body) => Body = (b) => b): ChainEntryRecord[] {
  const out: ChainEntryRecord[] = [];
  let chainId: string | null = null;
  for (const [i, original] of bodies.entries()) {
    const body = i === at ? edit(structuredClone(original)) : original;
    const head = out.at(-1) ?? null;
    const entry = buildEntry({
      head,
      chainId,
      kind: body.kind,
      data: body.data,
      signer: KEY.signer,
      nowNs: BigInt(body.timestamp_ns),
    });
    chainId ??= entry.entry_id;
    out.push(entry);
  }
  return out;
}

async function verify(entries: ChainEntryRecord[]) {
  let text = "";
  for await (const line of toJsonl(entries)) text += line;
  const file = scratch.write(`chain-${Math.random().toString(36).slice(2)}.jsonl`, text);
  return leash(["verify", "--file", file, "--pubkey", KEY.publicKeyHex]);
}

let bodies: Body[];
beforeAll(async () => {
  bodies = await writtenChain();
  expect(bodies.map((b) => b.kind)).toEqual(["session_registered", "decision", "post_exec", "circuit_reset"]);
});

describe("leash verify against the chain event schemas", () => {
  it("the re-signed chain, unchanged, verifies", async () => {
    const r = await verify(resigned(bodies));
    expect(r.stdout).toMatch(/^OK: 4 entries verified/);
    expect(r.code).toBe(0);
  });

  it.each([
    [
      "an extra field",
      (b: Body) => ({ ...b, data: { ...b.data, note: "x" } }),
      "/data/note is not a field of this kind",
    ],
    [
      "a missing field",
      (b: Body) => {
        delete b.data.session_id;
        return b;
      },
      "/data/session_id is required",
    ],
    [
      "a mistyped field",
      (b: Body) => ({ ...b, data: { ...b.data, success: "yes" } }),
      "/data/success must be boolean",
    ],
  ])("refuses a post_exec entry with %s, naming the entry, its kind and the field", async (_, edit, tail) => {
    const r = await verify(resigned(bodies, 2, edit));
    expect(r.stdout).toBe(`FAILED at entry 2 (seq 2): schema: post_exec v2 ${tail}\n`);
    expect(r.code).toBe(1);
  });

  it("refuses a kind no schema describes", async () => {
    const r = await verify(resigned(bodies, 3, (b) => ({ ...b, kind: "circuit_rest" })));
    expect(r.stdout).toBe(
      `FAILED at entry 3 (seq 3): schema: circuit_rest /kind no schema describes the kind "circuit_rest"\n`,
    );
    expect(r.code).toBe(1);
  });

  it("a chain break before the violation is reported as the break", async () => {
    const entries = resigned(bodies, 2, (b) => ({ ...b, data: { ...b.data, note: "x" } }));
    entries[1] = { ...entries[1]!, body: entries[1]!.body.replace('"bot"', '"bob"') };
    const r = await verify(entries);
    expect(r.stdout).toMatch(/^FAILED at entry 1 \(seq 1\): edited: /);
    expect(r.code).toBe(1);
  });

  it("older entry shapes still verify: a post_exec from before its settlement fields, a reservation_expired", async () => {
    const older = resigned(bodies, 2, (b) => {
      for (const f of ["late", "hold_status", "over_limit_usd", "idempotency_key"]) delete b.data[f];
      return b;
    });
    const last = older.at(-1)!;
    older.push(
      buildEntry({
        head: last,
        chainId: older[0]!.entry_id,
        kind: "reservation_expired",
        data: {
          session_id: bodies[0]!.data.session_id!,
          call_number: 1,
          reservation_id: `${bodies[0]!.data.session_id}#1`,
          released_usd: "1",
        },
        signer: KEY.signer,
        nowNs: BigInt(bodies[3]!.timestamp_ns) + 1n,
      }),
    );
    const r = await verify(older);
    expect(r.stdout).toMatch(/^OK: 5 entries verified/);
    expect(r.code).toBe(0);
  });
});

/** A rule of each kind the engine records in a decision's `policy`: deny, hitl, a rate limit, a monitor. */
const POLICY = scratch.write(
  "verify-ops.yaml",
  `version: 1
name: ops
rules:
  - name: no-drop
    match: { tool: db.drop }
    action: deny
    message: Dropping tables is not allowed.
  - name: big-payments
    match: { tool: payments.send }
    when: "has(args.amount_usd) && args.amount_usd > 500"
    action: hitl
  - name: search-rate
    match: { tool: search }
    action: { rate: { limit: 2, window_s: 60, per: agent } }
  - name: shadow-delete
    match: { tool: fs.delete }
    action: deny
    message: would refuse deletes
    mode: monitor
`,
);

describe.each(STORE_KINDS)("leash verify on a chain written with a policy, on %s", (kind) => {
  let store: TestStore;
  beforeAll(async () => {
    store = await testStore(kind);
  });
  afterAll(() => store.cleanup());
  const L = (argv: string[]) =>
    leash([...argv, "--store", store.url], "", { LEASH_SIGNING_KEY: KEY.privateKeyPem });

  it("verifies (and replays) every policy_published and decision entry; a retyped policy field fails", async () => {
    expect((await L(["session", "create", "--agent", "bot", "--session", "p1"])).code).toBe(0);
    const evaluate = async (tool: string, params: string, nonce: string) => {
      const r = await L([
        "evaluate",
        "--session",
        "p1",
        "--tool",
        tool,
        "--params",
        params,
        "--nonce",
        nonce,
        "--policy",
        POLICY,
      ]);
      expect(r.stdout, r.stderr).not.toBe("");
      return { code: r.code, out: JSON.parse(r.stdout) as { reason: string; hitl_request_id?: string } };
    };
    expect((await evaluate("db.drop", '{"t":1}', "1")).out.reason).toBe("policy_violation:rule:no-drop");
    const paused = await evaluate("payments.send", '{"amount_usd":900}', "2");
    expect([paused.code, paused.out.reason]).toEqual([4, "policy_hitl:rule:big-payments"]);
    const approved = await L(["hitl", "approve", paused.out.hitl_request_id!, "--operator", "alice"]);
    expect(approved.code, approved.stderr).toBe(0);
    expect((await evaluate("payments.send", '{"amount_usd":900}', "2")).code).toBe(0);
    const searches = [];
    for (const n of ["3", "4", "5"]) searches.push((await evaluate("search", `{"q":${n}}`, n)).code);
    expect(searches).toEqual([0, 0, 3]);
    expect((await evaluate("fs.delete", '{"p":"/x"}', "6")).code).toBe(0);

    const verified = await L(["verify", "--pubkey", KEY.publicKeyHex]);
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);
    const replayed = await L(["verify", "--replay", "--pubkey", KEY.publicKeyHex]);
    expect(replayed.code, replayed.stdout + replayed.stderr).toBe(0);
    expect(replayed.stdout).toContain("REPLAY OK");

    const exported = await L(["export", "--format", "jsonl"]);
    const written = exported.stdout
      .trim()
      .split("\n")
      .map((line) => (JSON.parse(line) as { body: Body }).body);
    expect(new Set(written.map((b) => b.kind))).toContain("policy_published");
    const judged = written.findIndex(
      (b) => (b.data.policy as { monitor?: unknown[] } | null)?.monitor?.length,
    );
    expect(judged).toBeGreaterThan(0);
    const retyped = await verify(
      resigned(written, judged, (b) => {
        (b.data.policy as { monitor: { would: unknown }[] }).monitor[0]!.would = 1;
        return b;
      }),
    );
    expect(retyped.stdout).toBe(
      `FAILED at entry ${judged} (seq ${judged}): schema: decision v3 /data/policy/monitor/0/would must be string\n`,
    );
    expect(retyped.code).toBe(1);
  });
});
