// evaluate's batches and in-memory projection (src/batcher.ts, src/projection.ts) on every real substrate:
// calls made together share one transaction, rows are read once and written once, and what another
// engine wrote to the same store is seen before the next call is judged.
import { generateKeyPair, verifyChain } from "@leash/chain";
import type { SessionRecord, Substrate, SubstrateTx } from "@leash/core";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, LeashError } from "../src/index.js";
import { Projection } from "../src/projection.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();

/** The substrate, counting its transactions and the session and account rows read and written in them. */
function counting(inner: Substrate) {
  const counts = { transactions: 0, sessionGets: 0, sessionUpdates: 0, accountGets: 0, accountUpdates: 0 };
  const wrapped = Object.create(inner) as Substrate;
  wrapped.transaction = (<T>(fn: (tx: SubstrateTx) => Promise<T>) =>
    inner.transaction((tx) => {
      counts.transactions++;
      const sessions = Object.create(tx.sessions) as SubstrateTx["sessions"];
      sessions.get = (id) => {
        counts.sessionGets++;
        return tx.sessions.get(id);
      };
      sessions.update = (record) => {
        counts.sessionUpdates++;
        return tx.sessions.update(record);
      };
      const budgets = Object.create(tx.budgets) as SubstrateTx["budgets"];
      budgets.getAccount = (id) => {
        counts.accountGets++;
        return tx.budgets.getAccount(id);
      };
      budgets.updateAccount = (account) => {
        counts.accountUpdates++;
        return tx.budgets.updateAccount(account);
      };
      return fn({
        ...tx,
        sessions,
        budgets,
        chain: tx.chain,
        nonces: tx.nonces,
        hitl: tx.hitl,
        outbox: tx.outbox,
        writeBatch: (batch) => {
          counts.sessionUpdates += batch.sessions.length;
          counts.accountUpdates += batch.accounts.length;
          return tx.writeBatch(batch);
        },
      });
    })) as Substrate["transaction"];
  const reset = () => {
    for (const key of Object.keys(counts) as Array<keyof typeof counts>) counts[key] = 0;
  };
  return { substrate: wrapped, counts, reset };
}

/** Call `i` of a session: its own tool, params and nonce, a cent's hold. */
function cent(sessionId: string, i: number) {
  return {
    session_id: sessionId,
    tool_name: `t${i}`,
    params: { i },
    nonce: `n${i}`,
    estimated_cost_usd: 0.01,
  };
}

describe.each(KINDS)("evaluate's batches on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it("judges calls made together in one transaction, reading and writing the session and its account once", async () => {
    store = await openStore(kind);
    const { substrate, counts, reset } = counting(store.substrate);
    const s = await createEngine({ substrate, signer: KEY.signer }).register({
      agent_id: "bot",
      config: { budget_usd: 1 },
    });
    const engine = createEngine({ substrate, signer: KEY.signer, rng: () => 0.5 });
    await engine.open(); // verifies the chain first (transactions of its own)
    reset();
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) => engine.evaluate(cent(s.session_id, i))),
    );
    expect(results.map((r) => r.verdict)).toEqual(Array(10).fill("ALLOW"));
    expect(results.map((r) => r.call_number)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(results.at(-1)?.budget_remaining_usd).toBe("0.9");
    // A fresh engine (the session was registered by another): one read of each row, one write.
    expect(counts).toEqual({
      transactions: 1,
      sessionGets: 1,
      sessionUpdates: 1,
      accountGets: 1,
      accountUpdates: 1,
    });
    const session = await engine.getSession(s.session_id);
    expect(session.call_count).toBe(10);
    expect(session.budget_remaining_usd).toBe("0.9");
  });

  it("reads nothing again while its own batches are the chain's last entries", async () => {
    store = await openStore(kind);
    const { substrate, counts, reset } = counting(store.substrate);
    const engine = createEngine({ substrate, signer: KEY.signer, rng: () => 0.5 });
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const call = (i: number) =>
      engine.evaluate({ session_id: s.session_id, tool_name: "t", params: { i }, estimated_cost_usd: 0.01 });
    await call(0);
    reset();
    await call(1);
    await call(2);
    expect(counts.sessionGets).toBe(0);
    expect(counts.accountGets).toBe(0);
    expect(counts.sessionUpdates).toBe(2);
  });

  it("judges a batch whose rows are in memory in one synchronous stretch: nothing runs between its calls", async () => {
    store = await openStore(kind);
    const signs: string[] = [];
    const signer = {
      ...KEY.signer,
      sign: (message: Uint8Array) => {
        // At the batch's first signature, a microtask that can only run once the batch yields.
        if (signs.length === 0) queueMicrotask(() => signs.push("microtask"));
        signs.push("sign");
        return KEY.signer.sign(message);
      },
    };
    const engine = createEngine({ substrate: store.substrate, signer, rng: () => 0.5 });
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const call = (i: number) => engine.evaluate(cent(s.session_id, i));
    await call(0); // the session and its account are in memory from here on
    signs.length = 0;
    const results = await Promise.all([1, 2, 3, 4, 5].map(call));
    expect(results.map((r) => r.call_number)).toEqual([2, 3, 4, 5, 6]);
    expect(results.map((r) => r.budget_remaining_usd)).toEqual(["0.98", "0.97", "0.96", "0.95", "0.94"]);
    // Decide, budget, entry and signature of all five before any other work of the process ran.
    expect(signs).toEqual(["sign", "sign", "sign", "sign", "sign", "microtask"]);
  });

  it("folds in what another engine on the same store wrote before judging the next call", async () => {
    store = await openStore(kind);
    const a = createEngine({ substrate: store.substrate, signer: KEY.signer, rng: () => 0.5 });
    const b = createEngine({ substrate: await store.another(), signer: KEY.signer, rng: () => 0.5 });
    const s = await a.register({ agent_id: "bot", config: { budget_usd: 1, max_repeat_calls: 3 } });
    const call = (engine: typeof a, nonce: string) =>
      engine.evaluate({
        session_id: s.session_id,
        tool_name: "t",
        params: {},
        nonce,
        estimated_cost_usd: 0.25,
      });
    expect((await call(a, "n1")).call_number).toBe(1);
    expect((await call(b, "n2")).call_number).toBe(2);
    // a's projection still says one call and $0.75 left: it must see b's entry and read again.
    const third = await call(a, "n3");
    expect(third.call_number).toBe(3);
    expect(third.budget_remaining_usd).toBe("0.25");
    // The repeat count spans both engines: b's fourth call of "t" is one too many.
    expect(await call(b, "n4")).toMatchObject({ verdict: "DENY", reason: "max_repeat_exceeded" });
    // b's nonce, recorded by b, is a duplicate for a (the circuit b tripped is checked first).
    const s2 = await b.register({ agent_id: "bot", config: {} });
    await b.evaluate({ session_id: s2.session_id, tool_name: "t", params: {}, nonce: 7 });
    expect(
      await a.evaluate({ session_id: s2.session_id, tool_name: "t", params: {}, nonce: 7 }),
    ).toMatchObject({
      verdict: "DENY",
      reason: "policy_violation:duplicate_nonce",
      call_number: 2,
    });
    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 100));
    expect(await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] })).toMatchObject({ ok: true });
    expect((await b.getSession(s.session_id)).call_count).toBe(4);
    expect((await b.getSession(s2.session_id)).state.circuit_tripped).toBe(true);
  });

  it("reads the sessions a batch lacks together, and an account they share once", async () => {
    store = await openStore(kind);
    const { substrate, counts, reset } = counting(store.substrate);
    const config = { budget_usd: 10, budget_scope: "agent" as const }; // one account for the agent's sessions
    const other = createEngine({ substrate: await store.another(), signer: KEY.signer, rng: () => 0.5 });
    const sessions = [];
    for (let i = 0; i < 3; i++) sessions.push(await other.register({ agent_id: "bot", config }));
    await other.evaluate({
      session_id: sessions[0]!.session_id,
      tool_name: "t",
      params: {},
      estimated_cost_usd: 0.1,
    });
    // An engine that has read nothing yet (as after another writer's entries: what they name is dropped).
    let inFlight = 0;
    let mostInFlight = 0;
    const wrapped = Object.create(substrate) as Substrate;
    wrapped.transaction = (<T>(fn: (tx: SubstrateTx) => Promise<T>) =>
      substrate.transaction((tx) => {
        const sessionStore = Object.create(tx.sessions) as SubstrateTx["sessions"];
        sessionStore.get = async (id) => {
          mostInFlight = Math.max(mostInFlight, ++inFlight);
          try {
            return await tx.sessions.get(id);
          } finally {
            inFlight--;
          }
        };
        return fn(
          Object.assign(Object.create(tx) as SubstrateTx, {
            sessions: sessionStore,
            writeBatch: tx.writeBatch.bind(tx),
          }),
        );
      })) as Substrate["transaction"];
    const engine = createEngine({ substrate: wrapped, signer: KEY.signer, rng: () => 0.5 });
    await engine.open();
    reset();
    const results = await Promise.all(
      sessions.flatMap(({ session_id }) =>
        [1, 2].map((i) =>
          engine.evaluate({ session_id, tool_name: "t", params: { i }, estimated_cost_usd: 0.1 }),
        ),
      ),
    );
    expect(results.map((r) => r.verdict)).toEqual(Array(6).fill("ALLOW"));
    expect(counts).toMatchObject({ transactions: 1, sessionGets: 3, accountGets: 1, accountUpdates: 1 });
    expect(mostInFlight).toBe(3);
    expect(results.map((r) => r.budget_remaining_usd).sort()).toEqual([
      "9.3",
      "9.4",
      "9.5",
      "9.6",
      "9.7",
      "9.8",
    ]);
  });

  it("folds in only a tail that links to what it knew; any other starts afresh", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, rng: () => 0.5 });
    const s = await engine.register({ agent_id: "bot", config: {} });
    await engine.evaluate({ session_id: s.session_id, tool_name: "t", params: {} });
    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 100));
    const before = entries.at(-2)!;
    /** What a projection that knew the chain up to `known` keeps of an unrelated cached session. */
    const keeps = async (known: { seq: number; entry_hash: string }) => {
      const projection = new Projection();
      projection.head = known;
      projection.sessions.set("elsewhere", { session_id: "elsewhere" } as SessionRecord);
      await store!.substrate.transaction(async (tx) => {
        await projection.begin(tx).open();
      });
      return projection.sessions.has("elsewhere");
    };
    // The last entry names only s: a projection one entry behind keeps what it knew of others.
    expect(await keeps({ seq: before.seq, entry_hash: before.entry_hash })).toBe(true);
    // The same seq with another hash: the store is not the chain it knew (restored, rewritten).
    expect(await keeps({ seq: before.seq, entry_hash: "f".repeat(64) })).toBe(false);
  });

  it("stamps each session and account row with the seq of the last entry it reflects", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer, rng: () => 0.5 });
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const results = await Promise.all(
      [1, 2, 3].map((i) =>
        engine.evaluate({ session_id: s.session_id, tool_name: "t", params: { i }, estimated_cost_usd: 0.1 }),
      ),
    );
    const last = Math.max(...results.map((r) => r.entry_seq));
    const rows = () =>
      store!.substrate.transaction(async (tx) => ({
        session: await tx.sessions.get(s.session_id),
        account: await tx.budgets.getAccount(`session:${s.session_id}`),
        head: await tx.chain.head(),
      }));
    let read = await rows();
    expect(read.session?.at_seq).toBe(last);
    expect(read.account?.at_seq).toBe(last);
    expect(read.head?.seq).toBe(last);
    // A settlement is an entry too: its rows move to it.
    await engine.postExec({ session_id: s.session_id, call_number: 2, actual_cost_usd: 0.05 });
    read = await rows();
    expect(read.head?.seq).toBe(last + 1);
    expect(read.session?.at_seq).toBe(last + 1);
    expect(read.account?.at_seq).toBe(last + 1);
  });

  it("fails only the call that fails when it wrote nothing, and commits the rest of its batch", async () => {
    store = await openStore(kind);
    const { substrate, counts, reset } = counting(store.substrate);
    const engine = createEngine({ substrate, signer: KEY.signer, rng: () => 0.5 });
    const s = await engine.register({ agent_id: "bot", config: {} });
    reset();
    const settled = await Promise.allSettled([
      engine.evaluate({ session_id: s.session_id, tool_name: "t", params: {} }),
      engine.evaluate({ session_id: "nobody", tool_name: "t", params: {} }),
      engine.evaluate({ session_id: s.session_id, tool_name: "u", params: {} }),
    ]);
    expect(settled[0]).toMatchObject({ status: "fulfilled", value: { call_number: 1, verdict: "ALLOW" } });
    expect(settled[1]).toMatchObject({ status: "rejected", reason: { code: "session_not_found" } });
    expect(settled[2]).toMatchObject({ status: "fulfilled", value: { call_number: 2, verdict: "ALLOW" } });
    expect(counts.transactions).toBe(1);
    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 100));
    expect(entries.filter((e) => e.kind === "decision")).toHaveLength(2);
  });

  it("judges the next batch while the one before waits for its COMMIT, on the rows that batch wrote", async () => {
    store = await openStore(kind);
    const inner = store.substrate;
    const events: string[] = [];
    let n = 0;
    // The store as it is, with every COMMIT taking 30 ms longer to be reported (a slow disk's fsync).
    const slow = Object.create(inner) as Substrate;
    slow.transaction = (<T>(fn: (tx: SubstrateTx) => Promise<T>) => {
      const id = ++n;
      return inner
        .transaction(async (tx) => {
          events.push(`judge ${id}`);
          return fn(tx);
        })
        .then(async (value) => {
          await new Promise((resolve) => setTimeout(resolve, 30));
          events.push(`durable ${id}`);
          return value;
        });
    }) as Substrate["transaction"];
    const engine = createEngine({ substrate: slow, signer: KEY.signer, rng: () => 0.5 });
    const s = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    events.length = 0;
    const call = (i: number) =>
      engine.evaluate({
        session_id: s.session_id,
        tool_name: `t${i}`,
        params: { i },
        estimated_cost_usd: 0.1,
      });
    const first = call(1);
    await new Promise((resolve) => setTimeout(resolve, 5)); // the first batch is waiting for its COMMIT
    const later = await Promise.all([call(2), call(3)]);
    const results = [await first, ...later];
    // The second batch was judged before the first was durable, and saw its call and its hold.
    const kinds = events.map((e) => e.split(" ")[0]);
    expect(kinds).toEqual(["judge", "judge", "durable", "durable"]);
    const [a, b] = events.map((e) => e.split(" ")[1]);
    expect(events.slice(2)).toEqual([`durable ${a}`, `durable ${b}`]);
    expect(results.map((r) => r.call_number)).toEqual([1, 2, 3]);
    expect(results.map((r) => r.budget_remaining_usd)).toEqual(["0.9", "0.8", "0.7"]);
    const session = await engine.getSession(s.session_id);
    expect(session).toMatchObject({ call_count: 3, budget_remaining_usd: "0.7" });
    const entries = await inner.transaction((tx) => tx.chain.range(0, 100));
    expect(await verifyChain(entries, { publicKeys: [KEY.signer.publicKeyHex] })).toMatchObject({ ok: true });
  });

  it("with maxBatch 1 gives every call its own transaction", async () => {
    store = await openStore(kind);
    const { substrate, counts, reset } = counting(store.substrate);
    const engine = createEngine({ substrate, signer: KEY.signer, maxBatch: 1 });
    const s = await engine.register({ agent_id: "bot", config: {} });
    reset();
    await Promise.all(
      [1, 2, 3].map((i) => engine.evaluate({ session_id: s.session_id, tool_name: "t", params: { i } })),
    );
    expect(counts.transactions).toBe(3);
  });
});

describe("maxBatch", () => {
  it.each([0, -1, 1.5, Number.NaN])("refuses %s", async (maxBatch) => {
    const store = await openStore("memory");
    try {
      expect(() => createEngine({ substrate: store.substrate, signer: KEY.signer, maxBatch })).toThrow(
        LeashError,
      );
    } finally {
      await store.close();
    }
  });
});
