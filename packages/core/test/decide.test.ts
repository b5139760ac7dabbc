import { describe, expect, it } from "vitest";
import {
  canonicalHash,
  type DecideInputs,
  decide,
  JsonNumberText,
  parseJsonKeepingNumberText,
  sha256Hex,
} from "../src/index.js";
import { loadVectors } from "./fixtures.js";

const ok = { tool_name: "click", params: { target: "a" }, nonce: 1 };
const d = (config: unknown, state: unknown, call: unknown, inputs?: DecideInputs) => {
  const r = decide(config, state, call, inputs);
  return `${r.verdict} ${r.reason}`;
};

describe("published vectors", () => {
  const vectors = loadVectors();
  it("has all 29", () => expect(vectors).toHaveLength(29));
  for (const v of vectors) {
    it(v.name, () => expect(d(v.config, v.state, v.call)).toBe(`${v.expected_verdict} ${v.expected_reason}`));
  }
});

describe("rule 1: canonicalizability, structurally", () => {
  const bad: [string, unknown][] = [
    ["NaN", { x: Number.NaN }],
    ["Infinity", { x: Number.POSITIVE_INFINITY }],
    ["-Infinity", { x: [Number.NEGATIVE_INFINITY] }],
    ["a Map (non-string keys)", { m: new Map([[1, 2]]) }],
    ["symbol key", { [Symbol("k")]: 1 }],
    ["function", { f: () => 1 }],
    ["symbol value", { s: Symbol("s") }],
    ["bigint", { b: 10n }],
    ["Date", { d: new Date(0) }],
    ["class instance", { c: new (class Point {})() }],
    ["undefined value", { u: undefined }],
    ["unsafe integer", { n: 2 ** 53 }],
    ["array params", [1, 2]],
    ["string params", "x"],
    ["number params", 5],
  ];
  for (const [name, params] of bad) {
    it(`denies ${name}`, () =>
      expect(d({}, {}, { tool_name: "t", params, nonce: 1 })).toBe("DENY policy_violation:malformed_input"));
  }
  it("denies a cycle", () => {
    const p: Record<string, unknown> = { a: 1 };
    p.self = p;
    expect(d({}, {}, { tool_name: "t", params: p })).toBe("DENY policy_violation:malformed_input");
  });
  it("denies nesting deeper than 64 and accepts 64", () => {
    const nest = (n: number) => {
      let v: unknown = 1;
      for (let i = 0; i < n; i++) v = { k: v };
      return v;
    };
    expect(d({}, {}, { tool_name: "t", params: nest(65) })).toBe("DENY policy_violation:malformed_input");
    expect(d({}, {}, { tool_name: "t", params: nest(63) })).toBe("ALLOW within_thresholds");
  });
  it("honours the fixture marker only when it is true", () => {
    expect(d({}, {}, { tool_name: "t", params: { __noncanonical__: true } })).toBe(
      "DENY policy_violation:malformed_input",
    );
    expect(d({}, {}, { tool_name: "t", params: { __noncanonical__: false } })).toBe(
      "ALLOW within_thresholds",
    );
  });
  it("accepts numbers kept as their JSON text, refusing only those Python reads as infinite", () => {
    // Python reads 1e16 as a float and 12345678901234567890 as an exact int: both hash, so both pass.
    for (const literal of ["1e16", "1.5e300", "10.0", "-0.0", "12345678901234567890"]) {
      const params = parseJsonKeepingNumberText(`{"x":${literal}}`);
      expect(d({}, {}, { tool_name: "t", params }), literal).toBe("ALLOW within_thresholds");
    }
    expect(d({}, {}, { tool_name: "t", params: { x: new JsonNumberText("1E400") } })).toBe(
      "DENY policy_violation:malformed_input",
    );
    // The same value as a JavaScript number keeps the documented fallback: an unsafe integer.
    expect(d({}, {}, { tool_name: "t", params: { x: 1e16 } })).toBe("DENY policy_violation:malformed_input");
  });
  it("reads missing or null params as {}", () => {
    expect(d({}, {}, { tool_name: "t" })).toBe("ALLOW within_thresholds");
    expect(d({}, {}, { tool_name: "t", params: null })).toBe("ALLOW within_thresholds");
  });
  it("precedes the circuit breaker", () =>
    expect(d({}, { circuit_tripped: true }, { tool_name: "t", params: { x: Number.NaN } })).toBe(
      "DENY policy_violation:malformed_input",
    ));
  it("never throws, whatever it is given (P1)", () => {
    const hostile = new Proxy(
      {},
      {
        get() {
          throw new Error("boom");
        },
        ownKeys() {
          throw new Error("boom");
        },
      },
    );
    for (const weird of [undefined, null, 1, "x", [], hostile, () => 1, Symbol("s")]) {
      expect(() => decide(weird, weird, weird)).not.toThrow();
      expect(() => decide({}, {}, { tool_name: "t", params: weird })).not.toThrow();
      expect(() => decide(weird, weird, ok)).not.toThrow();
    }
    expect(d({}, {}, hostile)).toBe("DENY policy_violation:malformed_input");
    expect(d({}, {}, { tool_name: "t", params: { p: hostile } })).toBe(
      "DENY policy_violation:malformed_input",
    );
  });
});

describe("rule 2: circuit breaker", () => {
  it("denies when tripped, with Python truthiness", () => {
    expect(d({}, { circuit_tripped: true }, ok)).toBe("DENY circuit_open");
    expect(d({}, { circuit_tripped: 1 }, ok)).toBe("DENY circuit_open");
    expect(d({}, { circuit_tripped: 0 }, ok)).toBe("ALLOW within_thresholds");
    expect(d({}, { circuit_tripped: [] }, ok)).toBe("ALLOW within_thresholds");
  });
});

describe("rule 3: anti-replay", () => {
  it("denies a seen nonce; 7 and '7' differ", () => {
    expect(d({}, { seen_nonces: [1] }, ok)).toBe("DENY policy_violation:duplicate_nonce");
    expect(d({}, { seen_nonces: ["1"] }, ok)).toBe("ALLOW within_thresholds");
  });
  it("skips a null or absent nonce", () => {
    expect(d({}, { seen_nonces: [null] }, { tool_name: "t", nonce: null })).toBe("ALLOW within_thresholds");
    expect(d({}, { seen_nonces: [1] }, { tool_name: "t" })).toBe("ALLOW within_thresholds");
  });
  it("is a no-effect resume against a terminal transition whatever resume_attempt says", () => {
    const pt = { decision: "approve", original_nonce: 1, terminal_status: " Consumed " };
    expect(d({}, { seen_nonces: [1], pending_transition: pt }, ok)).toBe(
      "DENY policy_violation:duplicate_resume_no_effect",
    );
    const pending = { ...pt, terminal_status: "pending" };
    expect(d({}, { seen_nonces: [1], pending_transition: pending }, ok)).toBe(
      "DENY policy_violation:duplicate_nonce",
    );
  });
});

describe("rule 4: HITL transition contract", () => {
  const params = { amount: 5 };
  const digest = canonicalHash(params);
  const call = { tool_name: "pay", params, nonce: 20 };
  const t = (pending_transition: unknown, c: unknown = call) => d({}, { pending_transition }, c);

  it("approve releases the bound pair once", () => {
    expect(t({ decision: "approve", original_nonce: 20, original_args_digest: digest })).toBe(
      "ALLOW hitl_transition:approve",
    );
    expect(t({ decision: " APPROVE ", original_nonce: 20 })).toBe("ALLOW hitl_transition:approve");
    expect(t({ decision: "approve", original_args_digest: digest })).toBe("ALLOW hitl_transition:approve");
  });
  it("approve: nonce then digest mismatch", () => {
    expect(t({ decision: "approve", original_nonce: 21, original_args_digest: "x" })).toBe(
      "DENY hitl_transition:nonce_mismatch",
    );
    expect(
      t({ decision: "approve", original_nonce: 20, original_args_digest: canonicalHash({ amount: 6 }) }),
    ).toBe("DENY hitl_transition:digest_mismatch");
    expect(t({ decision: "approve", original_nonce: 20, original_args_digest: 42 })).toBe(
      "DENY hitl_transition:digest_mismatch",
    );
  });
  it("binds the digest of params read from text as Python hashes them", () => {
    const fromText = parseJsonKeepingNumberText('{"amount":1e16}');
    // python3: sha256(json.dumps({"amount": 1e16}, sort_keys=True, separators=(",", ":")))
    const python = sha256Hex('{"amount":1e+16}');
    const pending = { decision: "approve", original_nonce: 20, original_args_digest: python };
    expect(d({}, { pending_transition: pending }, { tool_name: "pay", params: fromText, nonce: 20 })).toBe(
      "ALLOW hitl_transition:approve",
    );
  });
  it("approve on a terminal status has no effect", () => {
    for (const s of ["rejected", "superseded", "consumed", "executed", "expired", "revoked", "cancelled"]) {
      expect(t({ decision: "approve", original_nonce: 20, terminal_status: s })).toBe(
        "DENY hitl_transition:terminal_no_effect",
      );
    }
    for (const s of ["consumed_on_execute", "pending", 3]) {
      expect(t({ decision: "approve", original_nonce: 20, terminal_status: s })).toBe(
        "ALLOW hitl_transition:approve",
      );
    }
  });
  it("unbound authorization", () => {
    expect(t({ decision: "approve" })).toBe("DENY hitl_transition:unbound_authorization");
    expect(t({ decision: "approve", original_nonce: null, original_args_digest: "" })).toBe(
      "DENY hitl_transition:unbound_authorization",
    );
  });
  it("unknown and non-string decisions", () => {
    expect(t({ decision: "approve_with_conditions", original_nonce: 20 })).toBe(
      "DENY hitl_transition:unknown_decision",
    );
    expect(t({ decision: 1, original_nonce: 20 })).toBe("DENY hitl_transition:unknown_decision");
    expect(t({ original_nonce: 20 })).toBe("DENY hitl_transition:unknown_decision");
  });
  it("reject, defer, escalate", () => {
    expect(t({ decision: "reject", original_nonce: 20 })).toBe("DENY hitl_transition:reject");
    expect(t({ decision: "defer" })).toBe("HITL hitl_transition:defer_escalate");
    expect(t({ decision: "Escalate" })).toBe("HITL hitl_transition:defer_escalate");
  });
  it("a terminal resume attempt is a no-effect duplicate before anything else", () => {
    expect(t({ decision: "reject", terminal_status: "rejected", resume_attempt: true })).toBe(
      "DENY policy_violation:duplicate_resume_no_effect",
    );
    expect(t({ decision: "reject", terminal_status: "rejected", resume_attempt: "yes" })).toBe(
      "DENY hitl_transition:reject",
    );
  });
  it("modify releases only the successor, and a terminal status does not bar it", () => {
    const pt = {
      decision: "modify",
      original_nonce: 19,
      successor_nonce: 20,
      successor_args_digest: digest,
      terminal_status: "superseded",
    };
    expect(t(pt)).toBe("ALLOW hitl_transition:modify_successor");
    expect(t(pt, { ...call, nonce: 19 })).toBe("DENY hitl_transition:superseded_original");
    expect(t({ ...pt, successor_args_digest: "00" })).toBe("DENY hitl_transition:digest_mismatch");
    expect(t({ decision: "modify", original_nonce: 19 })).toBe("DENY hitl_transition:unbound_authorization");
  });
  it("outranks budget (the spec's deliberate note on rule 4 vs rule 5)", () =>
    expect(
      d(
        { budget_usd: 1 },
        { budget_remaining_usd: 0, pending_transition: { decision: "approve", original_nonce: 20 } },
        call,
      ),
    ).toBe("ALLOW hitl_transition:approve"));
  it("ignores an empty or non-object transition", () => {
    expect(t({})).toBe("ALLOW within_thresholds");
    expect(t("approve")).toBe("ALLOW within_thresholds");
  });
});

describe("rules 5 and 5b: budget", () => {
  it("exhausted needs budget > 0 and a present remaining <= 0", () => {
    expect(d({ budget_usd: 1 }, { budget_remaining_usd: 0 }, ok)).toBe("DENY budget_exhausted");
    expect(d({ budget_usd: 1 }, { budget_remaining_usd: -1 }, ok)).toBe("DENY budget_exhausted");
    expect(d({ budget_usd: 0 }, { budget_remaining_usd: 0 }, ok)).toBe("ALLOW within_thresholds");
    expect(d({ budget_usd: 1 }, {}, ok)).toBe("ALLOW within_thresholds");
    expect(d({ budget_usd: 1 }, { budget_remaining_usd: "lots" }, ok)).toBe("DENY budget_exhausted");
  });
  it("overrun when the estimate exceeds the pre-call remaining", () => {
    const s = { budget_remaining_usd: 0.1 };
    expect(d({ budget_usd: 1 }, s, { ...ok, estimated_cost_usd: 0.15 })).toBe("DENY budget_overrun");
    expect(d({ budget_usd: 1 }, s, { ...ok, estimated_cost_usd: 0.1 })).toBe("ALLOW within_thresholds");
    expect(d({ budget_usd: 0 }, s, { ...ok, estimated_cost_usd: 5 })).toBe("ALLOW within_thresholds");
    expect(d({ budget_usd: 1 }, s, { ...ok, estimated_cost_usd: "5" })).toBe("DENY budget_overrun");
  });
});

describe("rule 6: repeat guard", () => {
  const s = { last_tool_name: "click", repeat_counts: { click: 3 } };
  it("denies at the limit for the same tool only", () => {
    expect(d({ max_repeat_calls: 3 }, s, ok)).toBe("DENY max_repeat_exceeded");
    expect(d({ max_repeat_calls: 4 }, s, ok)).toBe("ALLOW within_thresholds");
    expect(d({ max_repeat_calls: 3 }, { ...s, last_tool_name: "type" }, ok)).toBe("ALLOW within_thresholds");
  });
  it("absent or 0 disables it", () => {
    expect(d({ max_repeat_calls: 0 }, s, ok)).toBe("ALLOW within_thresholds");
    expect(d({}, s, ok)).toBe("ALLOW within_thresholds");
  });
});

describe("rules 7–10", () => {
  it("hitl always", () => expect(d({ hitl_mode: "always" }, {}, ok)).toBe("HITL hitl_all_calls"));
  it("budget threshold; a missing remaining counts as 0; initial 0 disables", () => {
    const c = { hitl_mode: "on_threshold", hitl_budget_threshold: 0.2 };
    expect(d(c, { budget_initial_usd: 10, budget_remaining_usd: 2 }, ok)).toBe("HITL budget_threshold");
    expect(d(c, { budget_initial_usd: 10, budget_remaining_usd: 3 }, ok)).toBe("ALLOW within_thresholds");
    expect(d(c, { budget_initial_usd: 10 }, ok)).toBe("HITL budget_threshold");
    expect(d(c, { budget_initial_usd: 0 }, ok)).toBe("ALLOW within_thresholds");
    expect(d({ hitl_mode: "on_threshold" }, { budget_initial_usd: 10 }, ok)).toBe("ALLOW within_thresholds");
  });
  it("opaque context is key class × value class, at any depth", () => {
    const p = (params: unknown) => d({}, {}, { tool_name: "t", params });
    expect(p({ " Context ": " OPAQUE " })).toBe("HITL fail_closed:opaque_context");
    expect(p({ a: [[{ blob: "untestable" }]] })).toBe("HITL fail_closed:opaque_context");
    expect(p({ context: "the user asked" })).toBe("ALLOW within_thresholds");
    expect(p({ note: "opaque" })).toBe("ALLOW within_thresholds");
    expect(p({ ctx: { nested: "fine" } })).toBe("ALLOW within_thresholds");
  });
  it("default allows", () => expect(d({}, {}, ok)).toBe("ALLOW within_thresholds"));
});

// The reference normalizes keywords with Python's str.strip(), whose whitespace is not trim()'s:
// these were answered otherwise than the reference until 2 Dec 2026 (found by bench decide --reference).
describe("keywords are stripped as Python strips them", () => {
  const params = { amount: 5 };
  const digest = canonicalHash(params);
  const t = (pending: Record<string, unknown>) =>
    d(
      {},
      { pending_transition: { original_nonce: 20, original_args_digest: digest, ...pending } },
      { tool_name: "pay", params, nonce: 20 },
    );
  const p = (params: unknown) => d({}, {}, { tool_name: "t", params });

  it("strips U+001C–U+001F and U+0085, which trim() keeps", () => {
    for (const ws of ["\x1c", "\x1f", "\x85"]) {
      expect(t({ decision: `approve${ws}` })).toBe("ALLOW hitl_transition:approve");
      expect(t({ decision: "approve", terminal_status: `${ws}consumed` })).toBe(
        "DENY hitl_transition:terminal_no_effect",
      );
      expect(p({ ctx: `opaque${ws}` })).toBe("HITL fail_closed:opaque_context");
      expect(p({ [`${ws}blob`]: "unknown" })).toBe("HITL fail_closed:opaque_context");
    }
  });
  it("keeps U+FEFF, which trim() strips", () => {
    expect(t({ decision: "\ufeffapprove" })).toBe("DENY hitl_transition:unknown_decision");
    expect(t({ decision: "approve", terminal_status: "consumed\ufeff" })).toBe(
      "ALLOW hitl_transition:approve",
    );
    expect(p({ ctx: "\ufeffopaque" })).toBe("ALLOW within_thresholds");
    expect(p({ "context\ufeff": "opaque" })).toBe("ALLOW within_thresholds");
  });
  it("finds a marker behind any leading Python whitespace, not only ASCII", () => {
    for (const ws of ["\u3000", "\xa0", "\u2028 \t"]) {
      expect(p({ ctx: `${ws}Opaque` })).toBe("HITL fail_closed:opaque_context");
    }
  });
});

describe("extension guards", () => {
  const NOW = 1_000_000_000_000;
  it("are off unless configured", () => {
    expect(
      d({}, { total_calls: 1e6, window_counts: { click: 1e6 }, session_started_ns: 0 }, ok, { nowNs: NOW }),
    ).toBe("ALLOW within_thresholds");
  });
  it("timeout", () => {
    const c = { timeout_seconds: 10 };
    expect(d(c, { session_started_ns: NOW - 10e9 }, ok, { nowNs: NOW })).toBe("DENY timeout");
    expect(d(c, { session_started_ns: NOW - 9e9 }, ok, { nowNs: NOW })).toBe("ALLOW within_thresholds");
    expect(d(c, { session_started_ns: NOW }, ok)).toBe("DENY timeout");
  });
  it("global limit", () => {
    expect(d({ max_total_calls: 5 }, { total_calls: 5 }, ok)).toBe("DENY global_limit");
    expect(d({ max_total_calls: 5 }, { total_calls: 4 }, ok)).toBe("ALLOW within_thresholds");
  });
  it("time window per tool, reset when the window has passed", () => {
    const c = { window_duration_s: 60, window_max_calls: 2 };
    const s = { window_start_ns: NOW - 1e9, window_counts: { click: 2 } };
    expect(d(c, s, ok, { nowNs: NOW })).toBe("DENY window_exceeded");
    expect(d(c, s, { ...ok, tool_name: "type" }, { nowNs: NOW })).toBe("ALLOW within_thresholds");
    expect(d(c, { ...s, window_start_ns: NOW - 61e9 }, ok, { nowNs: NOW })).toBe("ALLOW within_thresholds");
    expect(d(c, s, ok)).toBe("DENY window_exceeded");
  });
  it("error amplification lowers the repeat limit by one on an error signal", () => {
    const c = { max_repeat_calls: 3, error_amplification: true };
    const s = { last_tool_name: "fetch", repeat_counts: { fetch: 2 } };
    const call = (params: unknown) => ({ tool_name: "fetch", params, nonce: 9 });
    expect(d(c, s, call({ last_error: "HTTP 401 Unauthorized" }))).toBe("DENY error_amplified_repeat");
    expect(d(c, s, call({ status: 503 }))).toBe("DENY error_amplified_repeat");
    // A number kept as its text is searched as Python prints it.
    expect(d(c, s, call(parseJsonKeepingNumberText('{"status":503.0}')))).toBe("DENY error_amplified_repeat");
    expect(d(c, s, call(parseJsonKeepingNumberText('{"status":4e16}')))).toBe("ALLOW within_thresholds");
    expect(d(c, s, call({ q: "weather" }))).toBe("ALLOW within_thresholds");
    expect(d({ max_repeat_calls: 3 }, s, call({ last_error: "401" }))).toBe("ALLOW within_thresholds");
  });
  it("error amplification also searches the error the previous result reported (inputs.errorText)", () => {
    const c = { max_repeat_calls: 3, error_amplification: true };
    const s = { last_tool_name: "fetch", repeat_counts: { fetch: 2 } };
    const call = { tool_name: "fetch", params: { id: 7 }, nonce: 9 };
    expect(d(c, s, call, { errorText: "HTTP 401 Unauthorized" })).toBe("DENY error_amplified_repeat");
    expect(d(c, s, call, { errorText: "not found" })).toBe("ALLOW within_thresholds");
    expect(d(c, s, call)).toBe("ALLOW within_thresholds");
    // Below the lowered limit, or with amplification off, an error text changes nothing.
    expect(d(c, { ...s, repeat_counts: { fetch: 1 } }, call, { errorText: "401" })).toBe(
      "ALLOW within_thresholds",
    );
    expect(d({ max_repeat_calls: 3 }, s, call, { errorText: "401" })).toBe("ALLOW within_thresholds");
  });
  it("probabilistic denial below 20 % of budget, with the rng passed in", () => {
    const c = { budget_usd: 10, probabilistic_deny: true, deny_jitter_ratio: 0.5 };
    const low = { budget_initial_usd: 10, budget_remaining_usd: 1 }; // p = 0.5 * 0.9 = 0.45
    expect(d(c, low, ok, { rng: 0.44 })).toBe("DENY probabilistic_deny");
    expect(d(c, low, ok, { rng: 0.46 })).toBe("ALLOW within_thresholds");
    expect(d(c, low, ok)).toBe("DENY probabilistic_deny");
    expect(d(c, { budget_initial_usd: 10, budget_remaining_usd: 3 }, ok, { rng: 0 })).toBe(
      "ALLOW within_thresholds",
    );
  });
  it("on_deny escalates an extension guard's denial to a human, never a certified rule's", () => {
    expect(d({ max_total_calls: 1, hitl_mode: "on_deny" }, { total_calls: 1 }, ok)).toBe(
      "HITL hitl_on_deny:global_limit",
    );
    expect(d({ budget_usd: 1, hitl_mode: "on_deny" }, { budget_remaining_usd: 0 }, ok)).toBe(
      "DENY budget_exhausted",
    );
  });
  it("sit after rule 6 and before rule 7", () => {
    const s = { last_tool_name: "click", repeat_counts: { click: 3 }, total_calls: 9 };
    expect(d({ max_repeat_calls: 3, max_total_calls: 9 }, s, ok)).toBe("DENY max_repeat_exceeded");
    expect(d({ max_total_calls: 9, hitl_mode: "always" }, s, ok)).toBe("DENY global_limit");
  });
});
