import { rmSync } from "node:fs";
import { generateKeyPair } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { openSqliteSubstrate } from "@leash/substrate-sqlite";

for (const f of ["", "-wal", "-shm"]) rmSync("/tmp/t.db" + f, { force: true });
const sub = await openSqliteSubstrate({ path: "/tmp/t.db" });
await sub.migrate();
const origTx = sub.transaction.bind(sub);
const acc = new Map();
let inFn = 0;
const wrap = (name, store) =>
  new Proxy(store, {
    get(t, k) {
      const v = t[k];
      if (typeof v !== "function") return v;
      return async (...a) => {
        const s = performance.now();
        try {
          return await v.apply(t, a);
        } finally {
          const key = name + "." + String(k);
          acc.set(key, (acc.get(key) ?? 0) + performance.now() - s);
        }
      };
    },
  });
sub.transaction = (fn) =>
  origTx(async (tx) => {
    const t = performance.now();
    const w = {
      sessions: wrap("sessions", tx.sessions),
      nonces: wrap("nonces", tx.nonces),
      budgets: wrap("budgets", tx.budgets),
      hitl: wrap("hitl", tx.hitl),
      chain: wrap("chain", tx.chain),
      outbox: wrap("outbox", tx.outbox),
    };
    try {
      return await fn(w);
    } finally {
      inFn += performance.now() - t;
    }
  });
const engine = createEngine({ substrate: sub, signer: generateKeyPair().signer });
const s = await engine.register({ agent_id: "a", config: { budget_usd: 1e9, budget_scope: "agent" } });
const N = 3000,
  C = 16;
acc.clear();
inFn = 0;
const t0 = performance.now();
await Promise.all(
  Array.from({ length: C }, async (_, w) => {
    for (let i = w; i < N; i += C)
      await engine.evaluate({
        session_id: s.session_id,
        tool_name: "t" + (i % 7),
        params: { i },
        nonce: i,
        estimated_cost_usd: 0.001,
      });
  }),
);
const total = performance.now() - t0;
console.log("per decision us", ((total * 1000) / N).toFixed(0), "inFn", ((inFn * 1000) / N).toFixed(0));
let storeSum = 0;
for (const [k, v] of [...acc].sort((a, b) => b[1] - a[1])) {
  storeSum += v;
  console.log(k.padEnd(30), ((v * 1000) / N).toFixed(1));
}
console.log("store total", ((storeSum * 1000) / N).toFixed(0));
