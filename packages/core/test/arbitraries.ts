// fast-check generators for configs, states and calls, ordinary and odd, shared by the property tests.
// Test-only; nothing here is exported from the package.
import fc from "fast-check";

/** Property runs: 1,000 by default (CI); `LEASH_PROPERTY_RUNS=100000` for a long local run. */
export const RUNS = Number(process.env.LEASH_PROPERTY_RUNS ?? 1000);

export const tools = fc.constantFrom("click", "search", "pay", "fetch");
export const nonce = fc.oneof(fc.integer({ min: 0, max: 50 }), fc.constantFrom("a", "b", "7"));
const plainValue = fc.oneof(fc.string({ maxLength: 8 }), fc.integer(), fc.boolean(), fc.constant(null));
export const params = fc.dictionary(
  fc.string({ maxLength: 6 }).filter((k) => k !== "__noncanonical__"),
  plainValue,
  {
    maxKeys: 4,
  },
);

/** Params that are canonicalizable and carry no opaque marker (markers are single words we avoid). */
export const ordinaryParams = fc.dictionary(
  fc.constantFrom("q", "target", "amount", "page"),
  fc.oneof(fc.integer(), fc.constantFrom("x", "y", "hello world")),
  { maxKeys: 3 },
);

export const money = fc.oneof(
  fc.constant(0),
  fc.integer({ min: 0, max: 100 }).map((c) => c / 100),
);

export const config = fc.record(
  {
    budget_usd: fc.oneof(fc.constant(0), fc.constant(1), fc.constant(10)),
    max_repeat_calls: fc.integer({ min: 0, max: 4 }),
    hitl_mode: fc.constantFrom("never", "always", "on_threshold", "on_deny"),
    hitl_budget_threshold: fc.double({ min: 0, max: 1, noNaN: true }),
    error_amplification: fc.boolean(),
    max_total_calls: fc.integer({ min: 0, max: 10 }),
  },
  { requiredKeys: [] },
);

export const pendingTransition = fc.record(
  {
    decision: fc.constantFrom("approve", "reject", "modify", "defer", "escalate", "other", " Approve "),
    original_nonce: fc.option(nonce, { nil: null }),
    original_args_digest: fc.option(fc.constantFrom("00", "ff"), { nil: null }),
    successor_nonce: fc.option(nonce, { nil: null }),
    successor_args_digest: fc.option(fc.constantFrom("00", "ff"), { nil: null }),
    terminal_status: fc.constantFrom(
      "pending",
      "consumed",
      "rejected",
      "superseded",
      "expired",
      "consumed_on_execute",
    ),
    resume_attempt: fc.boolean(),
  },
  { requiredKeys: ["decision"] },
);

export const state = fc.record(
  {
    circuit_tripped: fc.boolean(),
    seen_nonces: fc.array(nonce, { maxLength: 5 }),
    budget_initial_usd: fc.constantFrom(0, 1, 10),
    budget_remaining_usd: money,
    total_calls: fc.integer({ min: 0, max: 12 }),
    repeat_counts: fc.dictionary(tools, fc.integer({ min: 0, max: 6 })),
    last_tool_name: fc.option(tools, { nil: null }),
    pending_transition: fc.option(pendingTransition, { nil: null }),
  },
  { requiredKeys: [] },
);

export const call = fc.record(
  {
    tool_name: tools,
    params,
    nonce: fc.option(nonce, { nil: null }),
    estimated_cost_usd: money,
  },
  { requiredKeys: ["tool_name"] },
);
