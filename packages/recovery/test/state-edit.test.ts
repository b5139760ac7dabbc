// State the chain authenticates, on real stores: a session, account, hold or HITL row edited in the store
// itself (SQL on a real SQLite file and PostgreSQL, the raw port for memory) is never served — the next
// call on it is DENY fail_closed:state_unverified naming the row, nothing else changes — and
// `recover --repair` rebuilds it from the chain, after which the call decides as before the edit.
import { execFile } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { generateKeyPair } from "@leash/chain";
import type { Substrate } from "@leash/core";
import { createEngine, type Engine, type EvaluateResult } from "@leash/engine";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { recover } from "../src/index.js";
import {
  ensureBuilt,
  KINDS,
  type Kind,
  manualClock,
  openStore,
  param,
  REPO_ROOT,
  type TestStore,
} from "./support.js";

const KEY = generateKeyPair();

let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

type Clock = ReturnType<typeof manualClock>;

/** A budgeted session with a settled and an open hold, a tripped session, and an approved HITL request. */
async function seeded(kind: Kind) {
  store = await openStore(kind);
  const clock = manualClock();
  const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, clock });
  const budget = (await engine.register({ agent_id: "bot", config: { budget_usd: 10 } })).session_id;
  for (let i = 0; i < 2; i++) {
    clock.advanceMs(10);
    const r = await engine.evaluate({
      session_id: budget,
      tool_name: `t${i}`,
      params: { i },
      nonce: `n${i}`,
      estimated_cost_usd: 0.5,
    });
    expect(r.verdict).toBe("ALLOW");
    if (i === 0) await engine.postExec({ session_id: budget, call_number: 1, actual_cost_usd: "0.25" });
  }
  const tripped = (await engine.register({ agent_id: "looper", config: { max_repeat_calls: 2 } })).session_id;
  for (let i = 0; i < 3; i++) {
    clock.advanceMs(10);
    await engine.evaluate({ session_id: tripped, tool_name: "same", params: {}, nonce: `r${i}` });
  }
  expect((await engine.getSession(tripped)).state.circuit_tripped).toBe(true);
  const paused = (await engine.register({ agent_id: "reviewer", config: { hitl_mode: "always" } }))
    .session_id;
  clock.advanceMs(10);
  const asked = await engine.evaluate({
    session_id: paused,
    tool_name: "wire",
    params: { a: 1 },
    nonce: "p1",
  });
  expect(asked.verdict).toBe("HITL");
  await engine.resume({ session_id: paused, decision: "approve", operator_id: "alice" });
  return { store, clock, budget, tripped, paused, request: asked.hitl_request_id! };
}
type Seeded = Awaited<ReturnType<typeof seeded>>;

type Edit = "circuit" | "config" | "spent" | "limit" | "hold" | "hitl";

/** The row each edit changes: its table and key, as the refusal names them. */
function rowOf(what: Edit, s: Seeded): { table: string; key: string } {
  switch (what) {
    case "circuit":
      return { table: "sessions", key: s.tripped };
    case "config":
      return { table: "sessions", key: s.budget };
    case "spent":
    case "limit":
      return { table: "budget_accounts", key: `session:${s.budget}` };
    case "hold":
      return { table: "reservations", key: `${s.budget}#2` };
    case "hitl":
      return { table: "hitl_requests", key: s.request };
  }
}

/** The edit an attacker (or a broken tool) makes in the store, behind the engine's back. */
async function edit(s: Seeded, what: Edit): Promise<void> {
  const { key } = rowOf(what, s);
  if (s.store.kind === "memory") {
    // The memory store's rows are reachable through the raw port only (no engine): written as given.
    await s.store.substrate.transaction(async (tx) => {
      if (what === "circuit" || what === "config") {
        const row = (await tx.sessions.get(key))!;
        await tx.sessions.update(
          what === "circuit"
            ? { ...row, state: { ...row.state, circuit_tripped: false } }
            : { ...row, config: { ...row.config, budget_usd: 1000 } },
        );
      } else if (what === "spent" || what === "limit") {
        const row = (await tx.budgets.getAccount(key))!;
        await tx.budgets.updateAccount(
          what === "spent" ? { ...row, spent_usd: "0" } : { ...row, limit_usd: "1000" },
        );
      } else if (what === "hold") {
        const row = (await tx.budgets.getReservation(key))!;
        await tx.budgets.updateReservation({ ...row, amount_usd: "0.000001" });
      } else {
        const row = (await tx.hitl.get(key))!;
        await tx.hitl.update({ ...row, operator_id: "mallory" });
      }
    });
    return;
  }
  const sqlite = s.store.kind === "sqlite";
  const p = param(s.store, 1);
  const sql: Record<Edit, string> = {
    circuit: sqlite
      ? `UPDATE leash_sessions SET state = json_set(state, '$.circuit_tripped', json('false')) WHERE session_id = ?`
      : `UPDATE leash_sessions SET state = jsonb_set(state, '{circuit_tripped}', 'false') WHERE session_id = $1`,
    config: sqlite
      ? `UPDATE leash_sessions SET config = json_set(config, '$.budget_usd', 1000) WHERE session_id = ?`
      : `UPDATE leash_sessions SET config = jsonb_set(config, '{budget_usd}', '1000') WHERE session_id = $1`,
    spent: `UPDATE leash_budget_accounts SET spent_usd = '0' WHERE account_id = ${p}`,
    limit: `UPDATE leash_budget_accounts SET limit_usd = '1000' WHERE account_id = ${p}`,
    hold: `UPDATE leash_reservations SET amount_usd = '0.000001' WHERE reservation_id = ${p}`,
    hitl: `UPDATE leash_hitl_requests SET operator_id = 'mallory' WHERE request_id = ${p}`,
  };
  await s.store.sql(sql[what], [key]);
}

/** The next call on the edited row, by an engine that has not seen it (a fresh process, as the CLI is). */
async function nextCall(
  what: Edit,
  s: Seeded,
  substrate: Substrate,
  clock: Clock,
): Promise<EvaluateResult | "settled"> {
  const engine: Engine = createEngine({ substrate, signer: KEY.signer, clock });
  clock.advanceMs(10);
  if (what === "hold") {
    await engine.postExec({ session_id: s.budget, call_number: 2, actual_cost_usd: "0.25" });
    return "settled";
  }
  if (what === "hitl") {
    return engine.evaluate({ session_id: s.paused, tool_name: "wire", params: { a: 1 }, nonce: "p1" });
  }
  const session = what === "circuit" ? s.tripped : s.budget;
  return engine.evaluate({
    session_id: session,
    tool_name: "next",
    params: {},
    nonce: "next",
    estimated_cost_usd: 0.5,
  });
}

/** What the call decides on the untouched rows (and again once they are repaired). */
const UNTOUCHED: Record<Edit, unknown> = {
  circuit: { verdict: "DENY", reason: "circuit_open" },
  config: { verdict: "ALLOW", reason: "within_thresholds" },
  spent: { verdict: "ALLOW", reason: "within_thresholds" },
  limit: { verdict: "ALLOW", reason: "within_thresholds" },
  hold: "settled",
  hitl: { verdict: "ALLOW", reason: "hitl_transition:approve" },
};

const readChain = (substrate: Substrate) => substrate.transaction((tx) => tx.chain.range(0, 1_000_000));

/** The edited row as the store holds it, to show the refusal wrote nothing. */
async function rowNow(substrate: Substrate, what: Edit, key: string): Promise<unknown> {
  return substrate.transaction(async (tx) => {
    if (what === "circuit" || what === "config") return tx.sessions.get(key);
    if (what === "spent" || what === "limit") return tx.budgets.getAccount(key);
    if (what === "hold") return tx.budgets.getReservation(key);
    return tx.hitl.get(key);
  });
}

const EDITS: Edit[] = ["circuit", "config", "spent", "limit", "hold", "hitl"];

describe.each(KINDS)("state the chain authenticates, on %s", (kind: Kind) => {
  it("serves every row of an untouched store (a fresh engine decides as the first did)", async () => {
    const s = await seeded(kind);
    for (const what of ["circuit", "spent"] as const) {
      const answer = await nextCall(what, s, await s.store.another(), s.clock);
      expect(answer).toMatchObject(UNTOUCHED[what] as object);
    }
  });

  it.each(EDITS)(
    "refuses an edited %s row, naming it, and serves it again once recover --repair rebuilt it",
    async (what) => {
      const s = await seeded(kind);
      await edit(s, what);
      const substrate = await s.store.another();
      const { table, key } = rowOf(what, s);
      const chainBefore = (await readChain(substrate)).length;
      const rowBefore = await rowNow(substrate, what, key);
      if (what === "hold") {
        await expect(nextCall(what, s, substrate, s.clock)).rejects.toMatchObject({
          code: "state_unverified",
          table,
          key,
        });
      } else {
        const refused = (await nextCall(what, s, substrate, s.clock)) as EvaluateResult;
        expect(refused).toMatchObject({
          verdict: "DENY",
          reason: "fail_closed:state_unverified",
          state_failure: { table, key },
          entry_seq: null,
          receipt: null,
        });
        expect(refused.error).toContain(`${table} row ${JSON.stringify(key)}`);
      }
      // Nothing else changed: no entry appended, the edited row as it was left.
      expect((await readChain(substrate)).length).toBe(chainBefore);
      expect(await rowNow(substrate, what, key)).toEqual(rowBefore);

      const checked = await recover(substrate, { publicKeys: [KEY.publicKeyHex], clock: s.clock });
      expect(checked.problems.map((p) => p.code)).toEqual(["snapshot_mismatch"]);
      expect(checked.snapshots.differences.some((d) => d.table === table && d.id === key)).toBe(true);
      const repaired = await recover(substrate, {
        publicKeys: [KEY.publicKeyHex],
        clock: s.clock,
        signer: KEY.signer,
        repair: true,
      });
      expect(repaired.snapshots.repaired).toBeGreaterThan(0);
      expect(repaired.snapshots.differences).toEqual([]);
      expect((await readChain(substrate)).at(-1)!.kind).toBe("snapshot_repaired");
      const again = await nextCall(what, s, await s.store.another(), s.clock);
      expect(again).toMatchObject(UNTOUCHED[what] as object);
    },
  );
});

const run = promisify(execFile);

describe("leash evaluate on an edited SQLite file", () => {
  beforeAll(() => ensureBuilt(), 180_000);

  it("prints DENY fail_closed:state_unverified naming the row, and ALLOWs once recover --repair rebuilt it", async () => {
    const s = await seeded("sqlite");
    await edit(s, "spent");
    const keyFile = join(s.store.dir, "leash.key");
    writeFileSync(keyFile, KEY.privateKeyPem, { mode: 0o600 });
    const bin = join(REPO_ROOT, "apps/cli/dist/bin.js");
    const evaluate = async (nonce: string) => {
      const args = ["evaluate", "--store", s.store.url!, "--key-file", keyFile, "--session", s.budget];
      const out = await run(
        process.execPath,
        [bin, ...args, "--tool", "next", "--nonce", nonce, "--estimate", "0.5"],
        {
          cwd: s.store.dir,
          env: { ...process.env, LEASH_STATE_DIR: s.store.dir },
        },
      ).catch((error: { stdout: string; code: number }) => ({ stdout: error.stdout, code: error.code }));
      return JSON.parse(out.stdout) as EvaluateResult;
    };
    const refused = await evaluate("cli-1");
    expect(refused).toMatchObject({
      verdict: "DENY",
      reason: "fail_closed:state_unverified",
      state_failure: { table: "budget_accounts", key: `session:${s.budget}` },
    });
    const repaired = await recover(await s.store.another(), {
      publicKeys: [KEY.publicKeyHex],
      clock: s.clock,
      signer: KEY.signer,
      repair: true,
    });
    expect(repaired.snapshots.repaired).toBeGreaterThan(0);
    expect(await evaluate("cli-2")).toMatchObject({ verdict: "ALLOW" });
  }, 120_000);
});
