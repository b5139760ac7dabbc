// A fixed one-thread workload timed just before and just after a benchmark's measured window, so one
// run says how fast the machine was then (docs/architecture.md §8: compare ratios in one run). It measures no store.
import { buildEntry, type Json, type Signer } from "@leash/chain";

/** What one reference operation is, as the report names it. */
export const REFERENCE_WORKLOAD = "one signed decision entry: canonical JSON, SHA-256, Ed25519 (one thread)";

/** Shaped like the data of a benchmark decision entry, so the mix of work is the engine's own. */
const DATA: Record<string, Json> = {
  session_id: "bench-reference-p0-s0",
  agent_id: "bench-reference",
  organization_id: "default",
  call_number: 1234,
  tool_name: "search",
  params_hash: "9f2c1e4b7a0d3c6e9f2c1e4b7a0d3c6e9f2c1e4b7a0d3c6e9f2c1e4b7a0d3c6e",
  nonce: "0.1234",
  estimated_cost_usd: 0.001,
  verdict: "ALLOW",
  reason: "within_thresholds",
  budget_before_usd: "999998765.432",
  budget_after_usd: "999998765.431",
  reservation_id: "bench-reference-p0-s0#1234",
  rng: null,
  operator_id: null,
  state: {
    circuit_tripped: false,
    total_calls: 1233,
    session_started_ns: "1764547200000000000",
    budget_initial_usd: 1_000_000_000,
    budget_remaining_usd: 999998765.432,
    repeat_counts: { "search:9f2c1e4b": 1 },
    seen_nonces: [],
  },
  now_ns: "1764547212345678901",
};

const HEAD = { seq: 41, entry_hash: "a".repeat(64) };
const CHAIN_ID = "0192f0c4-0000-7000-8000-000000000000";
const WARMUP_ENTRIES = 2000;

function entry(signer: Signer, n: number): void {
  buildEntry({ head: HEAD, chainId: CHAIN_ID, kind: "decision", data: DATA, signer, nowNs: 1.7e18 + n });
}

/**
 * Signed entries per second that `signer` and this thread manage for `seconds` (at least one batch
 * of 16 is always timed, however short the time). The entries are built and dropped, never stored.
 */
export function referenceRate(signer: Signer, seconds: number): number {
  if (!Number.isFinite(seconds) || seconds <= 0) throw new RangeError("seconds must be a positive number");
  // Untimed first: the first few hundred entries run while V8 is still compiling the code.
  for (let i = 0; i < WARMUP_ENTRIES; i++) entry(signer, i);
  const start = performance.now();
  const deadline = start + seconds * 1000;
  let done = 0;
  let now = performance.now();
  do {
    for (let i = 0; i < 16; i++) {
      entry(signer, done);
      done++;
    }
    now = performance.now();
  } while (now < deadline);
  return done / ((now - start) / 1000);
}
