// When evaluate's batcher (src/batcher.ts) cuts a batch: calls that arrive in separate I/O callbacks of
// one turn of the event loop (a daemon's sockets) share a transaction; a lone call starts at once.
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import type { Substrate, SubstrateTx } from "@leash/core";
import { afterEach, describe, expect, it } from "vitest";
import { Batcher } from "../src/batcher.js";
import { createEngine } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();
const CALLS = 8;

/** The substrate, counting the transactions begun on it. */
function counting(inner: Substrate) {
  const counts = { transactions: 0 };
  const wrapped = Object.create(inner) as Substrate;
  wrapped.transaction = (<T>(fn: (tx: SubstrateTx) => Promise<T>) =>
    inner.transaction((tx) => {
      counts.transactions++;
      return fn(tx);
    })) as Substrate["transaction"];
  return { substrate: wrapped, counts };
}

/**
 * A unix-socket server and `n` connected clients in this process. Once every connection is accepted,
 * `fire()` writes one byte on each client in one go: the server reads them in one poll of the event
 * loop, one 'data' callback per connection, each calling `onData(i)`.
 */
async function sockets(n: number, onData: (i: number) => void) {
  const path = join(tmpdir(), `leash-batch-pump-${process.pid}-${Date.now()}.sock`);
  const accepted: Socket[] = [];
  const server: Server = createServer((socket) => {
    const i = accepted.length;
    accepted.push(socket);
    socket.on("data", () => onData(i));
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  const clients: Socket[] = [];
  for (let i = 0; i < n; i++) {
    const client = connect(path);
    await new Promise<void>((resolve) => client.once("connect", resolve));
    clients.push(client);
  }
  while (accepted.length < n) await new Promise((resolve) => setImmediate(resolve));
  return {
    fire: () => {
      for (const client of clients) client.write("x");
    },
    close: async () => {
      for (const socket of [...clients, ...accepted]) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe.each(KINDS)("evaluate's batches from separate socket callbacks on %s", (kind) => {
  let store: OpenedStore | undefined;
  let close: (() => Promise<unknown>) | undefined;
  afterEach(async () => {
    await close?.();
    await store?.close();
    close = store = undefined;
  });

  it(`judges ${CALLS} calls read from ${CALLS} sockets in one turn in two transactions, not one each`, async () => {
    store = await openStore(kind);
    const { substrate, counts } = counting(store.substrate);
    const engine = createEngine({ substrate, signer: KEY.signer });
    const session = await engine.register({ agent_id: "pump", config: { budget_usd: 10 } });
    await engine.open();
    const answers: Array<Promise<{ verdict: string }>> = [];
    const io = await sockets(CALLS, (i) => {
      answers.push(
        engine.evaluate({
          session_id: session.session_id,
          tool_name: `t${i}`,
          params: { i },
          nonce: `n${i}`,
          estimated_cost_usd: 0.01,
        }),
      );
    });
    close = io.close;
    const before = counts.transactions;
    io.fire();
    while (answers.length < CALLS) await new Promise((resolve) => setImmediate(resolve));
    const decided = await Promise.all(answers);
    expect(decided.map((answer) => answer.verdict)).toEqual(Array(CALLS).fill("ALLOW"));
    // The first call, with nothing in flight, goes at once; the others wait for the turn's end together.
    expect(counts.transactions - before).toBe(2);
  });
});

describe("the batcher's pump", () => {
  it("starts a lone call before the event loop's next check phase (no timer, no setImmediate)", async () => {
    const seen: boolean[] = [];
    let immediateRan = false;
    const batcher = new Batcher<number, number>(async (items, judged) => {
      seen.push(immediateRan);
      judged();
      return items.map((value) => ({ ok: true, value }));
    }, 16);
    setImmediate(() => {
      immediateRan = true;
    });
    expect(await batcher.submit(7)).toBe(7);
    expect(seen).toEqual([false]);
  });

  it("still judges calls made together (Promise.all) in one batch", async () => {
    const sizes: number[] = [];
    const batcher = new Batcher<number, number>(async (items, judged) => {
      sizes.push(items.length);
      judged();
      return items.map((value) => ({ ok: true, value }));
    }, 16);
    expect(await Promise.all([1, 2, 3].map((n) => batcher.submit(n)))).toEqual([1, 2, 3]);
    expect(sizes).toEqual([3]);
  });
});
