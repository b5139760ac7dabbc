// Benchmark (not a test): verification speed of a freshly built chain, node:crypto vs @noble.
// Prints one JSON line per verifier. Needs the built package: `npx tsc --build packages/chain` first.
// Usage: node packages/chain/bench/verify.mjs [--entries 20000] [--verifier all|node|node-parallel|noble] [--parallel 64]
// "node" is one core (synchronous node:crypto); "node-parallel" adds the libuv thread pool (all cores);
// "crypto.verify-only" is the floor: node:crypto's Ed25519 verify alone over the same inputs.

import { createPublicKey, verify } from "node:crypto";
import { buildEntry, chainIdOf, generateKeyPair, jwsOf, verifyChain } from "../dist/index.js";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
};
const entriesWanted = Number(flag("entries", "20000"));
const which = flag("verifier", "all");
const parallel = Number(flag("parallel", "64"));
const verifiers = which === "all" ? ["crypto.verify-only", "node", "node-parallel", "noble"] : [which];

// A chain of realistic decision entries (about 600 bytes of body each).
const key = generateKeyPair();
const entries = [];
let chainId = null;
const t0 = 1_700_000_000_000_000_000n;
for (let i = 0; i < entriesWanted; i++) {
  const prev = entries[i - 1];
  const entry = buildEntry({
    head: prev === undefined ? null : { seq: prev.seq, entry_hash: prev.entry_hash },
    chainId,
    kind: "decision",
    data: {
      session_id: `s_${i % 16}`,
      agent_id: "research-bot",
      organization_id: "org_1",
      call_number: i + 1,
      tool_name: "web_search",
      params_hash: "ab".repeat(32),
      nonce: `nonce-${i}`,
      verdict: i % 10 === 0 ? "DENY" : "ALLOW",
      reason: i % 10 === 0 ? "max_repeat_exceeded" : "within_thresholds",
      budget_before_usd: "0.500000",
      budget_after_usd: "0.498000",
      rng: null,
      operator_id: null,
    },
    signer: key.signer,
    nowNs: t0 + BigInt(i) * 1_000_000n,
  });
  if (i === 0) chainId = chainIdOf(entry);
  entries.push(entry);
}

function report(verifier, seconds, extra = {}) {
  console.log(
    JSON.stringify({
      bench: "verify",
      verifier,
      ...extra,
      entries: entries.length,
      seconds: Number(seconds.toFixed(3)),
      entries_per_sec: Math.round(entries.length / seconds),
      us_per_entry: Number(((seconds * 1e6) / entries.length).toFixed(1)),
    }),
  );
}

function floor() {
  const publicKey = createPublicKey(key.publicKeyPem);
  const inputs = entries.map((e) => {
    const [header, payload, signature] = jwsOf(e).split(".");
    return [Buffer.from(`${header}.${payload}`, "latin1"), Buffer.from(signature, "base64url")];
  });
  const start = process.hrtime.bigint();
  for (const [input, signature] of inputs) {
    if (!verify(null, input, publicKey, signature)) throw new Error("a signature did not verify");
  }
  report("crypto.verify-only", Number(process.hrtime.bigint() - start) / 1e9);
}

for (const verifier of verifiers) {
  if (verifier === "crypto.verify-only") {
    floor();
    continue;
  }
  const options = {
    publicKeys: [key.publicKeyHex],
    verifier: verifier === "noble" ? "noble" : "node",
    parallel: verifier === "node-parallel" ? parallel : 1,
  };
  // A short warm-up so the JIT has compiled the walk before it is timed.
  await verifyChain(entries.slice(0, Math.min(500, entries.length)), options);
  const start = process.hrtime.bigint();
  const result = await verifyChain(entries, options);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  if (!result.ok || result.count !== entries.length) {
    throw new Error(`verification failed: ${JSON.stringify(result)}`);
  }
  const extra =
    verifier === "node-parallel" ? { parallel, threadpool: Number(process.env.UV_THREADPOOL_SIZE ?? 4) } : {};
  report(verifier, seconds, extra);
}
