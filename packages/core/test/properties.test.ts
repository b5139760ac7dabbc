// The spec's invariants P1–P9 (§3.3) on decide(), checked with fast-check.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ALL_REASONS, canonicalHash, decide } from "../src/index.js";
import * as arb from "./arbitraries.js";

const opts = { numRuns: arb.RUNS };
const reasons = new Set<string>(ALL_REASONS);
const noPending = <T extends Record<string, unknown>>(s: T) => ({ ...s, pending_transition: null });

describe("SP/1.0 invariants on decide", () => {
  it("P1 totality: returns a known verdict and reason for any input, never throws", () => {
    fc.assert(
      fc.property(fc.anything(), fc.anything(), fc.anything(), (c, s, k) => {
        const r = decide(c, s, k);
        return ["ALLOW", "DENY", "HITL"].includes(r.verdict) && reasons.has(r.reason);
      }),
      opts,
    );
    fc.assert(
      fc.property(
        arb.config,
        arb.state,
        fc.record({ tool_name: arb.tools, params: fc.anything() }),
        (c, s, k) => reasons.has(decide(c, s, k).reason),
      ),
      opts,
    );
  });

  it("P2 determinism: identical inputs give identical outputs", () => {
    fc.assert(
      fc.property(arb.config, arb.state, arb.call, (c, s, k) => {
        const a = decide(c, s, k);
        const b = decide(structuredClone(c), structuredClone(s), structuredClone(k));
        return a.verdict === b.verdict && a.reason === b.reason;
      }),
      opts,
    );
  });

  it("P3 circuit dominance: a tripped circuit denies every canonicalizable call as circuit_open", () => {
    fc.assert(
      fc.property(arb.config, arb.state, arb.call, (c, s, k) => {
        const r = decide(c, { ...s, circuit_tripped: true }, k);
        return r.verdict === "DENY" && r.reason === "circuit_open";
      }),
      opts,
    );
  });

  it("P4 replay refusal: a seen nonce is denied", () => {
    fc.assert(
      fc.property(arb.config, arb.state, arb.call, arb.nonce, (c, s, k, n) => {
        const r = decide(c, { ...s, seen_nonces: [...(s.seen_nonces ?? []), n] }, { ...k, nonce: n });
        return r.verdict === "DENY";
      }),
      opts,
    );
  });

  it("P5 repeat limit: count ≥ max on the same tool is denied", () => {
    fc.assert(
      fc.property(
        arb.config,
        arb.state,
        arb.call,
        fc.integer({ min: 1, max: 5 }),
        fc.nat(3),
        (c, s, k, max, extra) => {
          const st = noPending({
            ...s,
            last_tool_name: k.tool_name,
            repeat_counts: { [k.tool_name]: max + extra },
          });
          return decide({ ...c, max_repeat_calls: max }, st, k).verdict === "DENY";
        },
      ),
      opts,
    );
  });

  it("P6 budget floor: no ALLOW drives remaining below zero when the estimate is supplied", () => {
    fc.assert(
      fc.property(arb.config, arb.state, arb.call, (c, s, k) => {
        const cfg = { ...c, budget_usd: 1 };
        const st = noPending(s);
        const r = decide(cfg, st, k);
        if (r.verdict !== "ALLOW") return true;
        return (
          (st.budget_remaining_usd ?? 0) - (k.estimated_cost_usd ?? 0) >= 0 ||
          st.budget_remaining_usd === undefined
        );
      }),
      opts,
    );
  });

  it("P7 HITL always: with no higher rule firing, always-mode yields HITL", () => {
    fc.assert(
      fc.property(arb.tools, arb.ordinaryParams, arb.nonce, (tool, params, n) => {
        const r = decide({ hitl_mode: "always" }, {}, { tool_name: tool, params, nonce: n });
        return r.verdict === "HITL" && r.reason === "hitl_all_calls";
      }),
      opts,
    );
  });

  it("P8 fail closed: opaque context is never a silent ALLOW", () => {
    const marker = fc.constantFrom("opaque", "Unknown", " unevaluable", "UNTESTABLE");
    const key = fc.constantFrom("ctx", "context", "opaque", "raw_context", "blob", " CTX ");
    fc.assert(
      fc.property(arb.config, arb.state, arb.call, key, marker, fc.nat(3), (c, s, k, key, m, depth) => {
        let buried: unknown = { [key]: m };
        for (let i = 0; i < depth; i++) buried = i % 2 ? { inner: buried } : [buried];
        const r = decide(c, noPending(s), { ...k, params: { ...k.params, buried } });
        return r.verdict !== "ALLOW";
      }),
      opts,
    );
  });

  it("P9 bound authorization: an approval releases exactly its (nonce, digest) pair", () => {
    fc.assert(
      fc.property(arb.params, arb.nonce, arb.call, (approved, n, k) => {
        const digest = canonicalHash(approved);
        const st = {
          pending_transition: { decision: "approve", original_nonce: n, original_args_digest: digest },
        };
        const r = decide({}, st, k);
        const isPair = k.nonce === n && canonicalHash(k.params ?? {}) === digest;
        return r.verdict === (isPair ? "ALLOW" : "DENY");
      }),
      opts,
    );
    // and the pair itself is released
    fc.assert(
      fc.property(arb.params, arb.nonce, (approved, n) => {
        const st = {
          pending_transition: {
            decision: "approve",
            original_nonce: n,
            original_args_digest: canonicalHash(approved),
          },
        };
        return decide({}, st, { tool_name: "pay", params: approved, nonce: n }).verdict === "ALLOW";
      }),
      opts,
    );
  });
});

it("RUNS is at least 1,000 in CI", () => expect(arb.RUNS).toBeGreaterThanOrEqual(1000));
