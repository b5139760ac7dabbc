// One request message is one decision: a copy delivered again, to the same engine or to another engine on
// the same store, gets the recorded answer; run identically on the memory, SQLite and PostgreSQL substrates.
import { generateKeyPair, verifyChain } from "@leash/chain";
import type { MessageStore, Substrate, SubstrateTx } from "@leash/core";
import { sqlInSchema } from "@leash/test-stores";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, type EvaluateRequest, type EvaluateResult } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();
const T0 = 1_764_806_400_000_000_000;
const MESSAGE = { id: "0193a4b2-7c3a-7d4e-9f10-aa00bb11cc22", sent_ns: T0 };

const decisions = (substrate: Substrate) =>
  substrate.transaction(async (tx) =>
    (await tx.chain.range(0, 100_000)).filter((entry) => entry.kind === "decision"),
  );

/**
 * The real store, except that a batch's prefetch of message records finds none: what a writer that
 * raced past the read would see. The insert still meets the real unique key; single reads are real.
 */
function blindToRecords(substrate: Substrate): Substrate {
  const blind = (tx: SubstrateTx): SubstrateTx => {
    const messages: MessageStore = {
      get: (sessionId, messageId) => tx.messages.get(sessionId, messageId),
      getEach: async (pairs) => pairs.map(() => null),
      insert: (record) => tx.messages.insert(record),
      prune: (beforeNs, limit) => tx.messages.prune(beforeNs, limit),
      count: () => tx.messages.count(),
    };
    const { sessions, nonces, budgets, hitl, chain, outbox } = tx;
    // The batch's writes go to the real stores, the real message store's unique key included.
    return { sessions, nonces, budgets, hitl, chain, outbox, messages, writeBatch: (b) => tx.writeBatch(b) };
  };
  return new Proxy(substrate, {
    get(target, property) {
      if (property === "transaction") {
        return <T>(fn: (tx: SubstrateTx) => Promise<T>) => target.transaction((tx) => fn(blind(tx)));
      }
      const value = Reflect.get(target, property, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** What a caller is told: the verdict, its reason, its receipt, its entry. */
const answer = (r: EvaluateResult) => ({
  verdict: r.verdict,
  reason: r.reason,
  receipt: r.receipt,
  call_number: r.call_number,
  entry_seq: r.entry_seq,
  entry_hash: r.entry_hash,
  reservation_id: r.reservation_id,
  budget_remaining_usd: r.budget_remaining_usd,
  hitl_request_id: r.hitl_request_id,
});

describe.each(KINDS)("message ids on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });
  const setup = async () => {
    store = await openStore(kind);
    let now = T0;
    const clock = { nowNs: () => now++ };
    const make = (substrate: Substrate) => createEngine({ substrate, signer: KEY.signer, clock });
    return { engine: make(store.substrate), make, store };
  };
  const call = (sessionId: string, overrides: Partial<EvaluateRequest> = {}): EvaluateRequest => ({
    session_id: sessionId,
    tool_name: "search",
    params: { q: "x" },
    nonce: "n1",
    estimated_cost_usd: "0.25",
    message: MESSAGE,
    ...overrides,
  });

  it("a message delivered again gets the recorded answer: one decision, one hold, no duplicate_nonce trip", async () => {
    const { engine, store } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const first = await engine.evaluate(call(s.session_id));
    const again = await engine.evaluate(call(s.session_id));
    expect(first.verdict).toBe("ALLOW");
    expect(first.redelivered).toBeUndefined();
    expect(answer(again)).toEqual(answer(first));
    expect(again.redelivered).toBe(true);
    expect(await decisions(store.substrate)).toHaveLength(1);
    const view = await engine.getSession(s.session_id);
    expect([view.call_count, view.state.circuit_tripped ?? false, view.budget_remaining_usd]).toEqual([
      1,
      false,
      "0.75",
    ]);
    const holds = await store.substrate.transaction((tx) => tx.budgets.listReservations({}));
    expect(holds).toHaveLength(1);
    // A new message carrying the spent nonce is a new request: decided, and denied as a replay.
    const replayed = await engine.evaluate(call(s.session_id, { message: { ...MESSAGE, id: "other-id" } }));
    expect([replayed.verdict, replayed.reason]).toEqual(["DENY", "policy_violation:duplicate_nonce"]);
  });

  it("another engine on the same store answers a re-delivered message from the record (a restart, a second daemon)", async () => {
    const { engine, make, store } = await setup();
    const s = await engine.register({ agent_id: "bot", config: {} });
    const first = await engine.evaluate(call(s.session_id, { nonce: null }));
    const second = make(await store.another());
    const again = await second.evaluate(call(s.session_id, { nonce: null }));
    expect(answer(again)).toEqual(answer(first));
    expect(again.redelivered).toBe(true);
    expect(await decisions(store.substrate)).toHaveLength(1);
    expect((await second.getSession(s.session_id)).call_count).toBe(1);
    // The chain the second engine did not write to still verifies.
    const chain = await store.substrate.transaction((tx) => tx.chain.range(0, 100));
    expect((await verifyChain(chain, { publicKeys: [KEY.signer.publicKeyHex] })).ok).toBe(true);
  });

  it("two engines racing on one message, and two copies in one batch, make exactly one decision", async () => {
    const { engine, make, store } = await setup();
    const other = make(await store.another());
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const answers = await Promise.all([
      engine.evaluate(call(s.session_id)),
      other.evaluate(call(s.session_id)),
      engine.evaluate(call(s.session_id)),
      other.evaluate(call(s.session_id)),
    ]);
    const decided = await decisions(store.substrate);
    expect(decided).toHaveLength(1);
    for (const a of answers) expect(answer(a)).toEqual(answer(answers[0]!));
    expect(answers.filter((a) => a.redelivered !== true)).toHaveLength(1);
    expect(answers[0]!.entry_seq).toBe(decided[0]!.seq);
    expect((await engine.getSession(s.session_id)).state.circuit_tripped ?? false).toBe(false);
  });

  it("an engine that raced past the read loses on the unique key and answers with the winner's decision", async () => {
    const { engine, make, store } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const first = await engine.evaluate(call(s.session_id));
    const loser = make(blindToRecords(await store.another()));
    const again = await loser.evaluate(call(s.session_id));
    expect(answer(again)).toEqual(answer(first));
    expect(again.redelivered).toBe(true);
    // Its own decision (a duplicate_nonce DENY that would trip the circuit) rolled back whole.
    expect(await decisions(store.substrate)).toHaveLength(1);
    const view = await engine.getSession(s.session_id);
    expect([view.call_count, view.state.circuit_tripped ?? false]).toEqual([1, false]);
  });

  it("a HITL answer is recorded too: the copy names the same request, and no second request opens", async () => {
    const { engine, store } = await setup();
    const s = await engine.register({ agent_id: "bot", config: { hitl_mode: "always" } });
    const first = await engine.evaluate(call(s.session_id));
    const again = await engine.evaluate(call(s.session_id));
    expect(first.verdict).toBe("HITL");
    expect(again.hitl_request_id).toBe(first.hitl_request_id);
    expect(answer(again)).toEqual(answer(first));
    expect(await engine.listHitl({ sessionId: s.session_id })).toHaveLength(1);
    expect(await decisions(store.substrate)).toHaveLength(1);
  });

  it("another call under a decided message id is refused (invalid_argument) and writes nothing", async () => {
    const { engine, store } = await setup();
    const s = await engine.register({ agent_id: "bot", config: {} });
    await engine.evaluate(call(s.session_id));
    await expect(engine.evaluate(call(s.session_id, { tool_name: "delete" }))).rejects.toMatchObject({
      code: "invalid_argument",
    });
    await expect(engine.evaluate(call(s.session_id, { params: { q: "y" } }))).rejects.toMatchObject({
      code: "invalid_argument",
    });
    // The same id in another session is another message.
    const t = await engine.register({ agent_id: "bot", config: {} });
    expect((await engine.evaluate(call(t.session_id))).redelivered).toBeUndefined();
    expect(await decisions(store.substrate)).toHaveLength(2);
  });

  it("without a message every call is decided, as in library mode before; a malformed message is refused", async () => {
    const { engine, store } = await setup();
    const s = await engine.register({ agent_id: "bot", config: {} });
    const plain = { session_id: s.session_id, tool_name: "search", params: { q: "x" } };
    const a = await engine.evaluate(plain);
    const b = await engine.evaluate(plain);
    expect([a.call_number, b.call_number]).toEqual([1, 2]);
    expect(await store.substrate.transaction((tx) => tx.messages.count())).toBe(0);
    for (const message of [
      { id: "", sent_ns: T0 },
      { id: "has space", sent_ns: T0 },
      { id: "x".repeat(129), sent_ns: T0 },
      { id: "ok", sent_ns: 0 },
      { id: "ok", sent_ns: 1.5 },
    ]) {
      await expect(engine.evaluate({ ...plain, message })).rejects.toMatchObject({
        code: "invalid_argument",
      });
    }
    expect(await decisions(store.substrate)).toHaveLength(2);
  });

  it("forgetMessages prunes ids sent before the bound; the rest still answer from the record", async () => {
    const { engine, store } = await setup();
    const s = await engine.register({ agent_id: "bot", config: {} });
    const old = { id: "old", sent_ns: T0 - 1_000_000_000_000 };
    const recent = { id: "recent", sent_ns: T0 };
    await engine.evaluate(call(s.session_id, { nonce: null, message: old }));
    await engine.evaluate(call(s.session_id, { nonce: null, message: recent }));
    expect(await engine.forgetMessages(T0 - 1)).toBe(1);
    expect(await store.substrate.transaction((tx) => tx.messages.count())).toBe(1);
    expect((await engine.evaluate(call(s.session_id, { nonce: null, message: recent }))).redelivered).toBe(
      true,
    );
    await expect(engine.forgetMessages(T0, 0)).rejects.toMatchObject({ code: "invalid_argument" });
  });
});

describe.each(KINDS.filter((k) => k !== "memory"))("a recorded answer edited in the store (%s)", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  /** Raw SQL on the store's tables, as someone with file or database access would run it. */
  async function sql(s: OpenedStore, text: string): Promise<void> {
    if (s.path !== null) {
      const db = new Database(s.path);
      try {
        db.pragma("busy_timeout = 5000");
        db.exec(text);
      } finally {
        db.close();
      }
    } else {
      await sqlInSchema(s.schema!, text);
    }
  }

  it("is never served: the copy fails closed instead of reading ALLOW off an edited DENY", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    const s = await engine.register({ agent_id: "bot", config: { denied_tools: ["rm"] } });
    const request = { session_id: s.session_id, tool_name: "rm", params: {}, message: MESSAGE };
    expect((await engine.evaluate(request)).verdict).toBe("DENY");
    await sql(
      store,
      `UPDATE leash_chain SET body = replace(body, '"verdict":"DENY"', '"verdict":"ALLOW"') WHERE kind = 'decision'`,
    );
    // The edited entry is the chain's head, so the head check that runs before any read of the batch
    // refuses the store first; either way the copy is never answered from the edited record.
    const copy = await engine.evaluate(request).then(
      (r) => ({ verdict: r.verdict, reason: r.reason }),
      (e: { code?: string }) => ({ verdict: "thrown", reason: e.code }),
    );
    expect(copy).toEqual({ verdict: "DENY", reason: "fail_closed:chain_unverified" });
  });

  it("is never served when the edited record lies behind the head: the copy is refused as corrupt", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    const s = await engine.register({ agent_id: "bot", config: { denied_tools: ["rm"] } });
    const request = { session_id: s.session_id, tool_name: "rm", params: {}, message: MESSAGE };
    expect((await engine.evaluate(request)).verdict).toBe("DENY");
    // Another call moves the head past the recorded decision.
    expect((await engine.evaluate({ session_id: s.session_id, tool_name: "ls", params: {} })).verdict).toBe(
      "ALLOW",
    );
    await sql(
      store,
      `UPDATE leash_chain SET body = replace(body, '"verdict":"DENY"', '"verdict":"ALLOW"') WHERE kind = 'decision' AND body LIKE '%"tool_name":"rm"%'`,
    );
    await expect(engine.evaluate(request)).rejects.toMatchObject({ code: "corrupt" });
  });
});
