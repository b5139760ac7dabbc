// A seeded mixed decide() corpus closer to real traffic than the 29 published vectors: a fifth HITL
// approvals over 50–600-byte nested unicode params (digested), a fifth plain ALLOWs, the rest every reason.
// It builds inputs and their expected outcome; it measures nothing (bench.ts does).

import type { Vector } from "@leash/cli/internal";
import { canonicalHash, decide } from "@leash/core";

export interface CorpusCase {
  readonly config: unknown;
  readonly state: unknown;
  readonly call: unknown;
  readonly expectedVerdict: string;
  readonly expectedReason: string;
  readonly kind: "hitl_approval" | "plain_allow" | "fixture";
  /** Names the case in reports: the vector's name, or the kind and its number. */
  readonly label: string;
}

/** mulberry32: small, seeded, good enough to vary inputs reproducibly. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = [
  "search",
  "résumé",
  "東京",
  "naïve",
  "emoji 🚀",
  "Ünïcödé",
  "données",
  "path/to/file",
  "q=1&r=2",
];

/** Nested params whose canonical JSON is about `bytes` long (strings, numbers, arrays, objects, unicode). */
function paramsOfSize(random: () => number, bytes: number): Record<string, unknown> {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(random() * xs.length)]!;
  const out: Record<string, unknown> = {
    query: pick(WORDS),
    options: { limit: Math.floor(random() * 100), safe: random() < 0.5, lang: pick(["en", "fr", "ja"]) },
  };
  let size = JSON.stringify(out).length;
  for (let i = 0; size < bytes; i++) {
    const value =
      i % 3 === 0
        ? { id: i, label: `${pick(WORDS)} ${i}`, score: Math.round(random() * 1000) / 8 }
        : i % 3 === 1
          ? [i, pick(WORDS), { nested: { deep: [true, null, i * 2.5] } }]
          : `${pick(WORDS)} ${"x".repeat(Math.floor(random() * 20))}`;
    out[`field_${i}`] = value;
    size = JSON.stringify(out).length;
  }
  return out;
}

/** A fifth: a human approved this exact call (rule 4, the digest is computed and compared). */
function hitlApproval(random: () => number, n: number): CorpusCase {
  const params = paramsOfSize(random, 50 + Math.floor(random() * 550));
  const nonce = `approve-${n}`;
  return {
    config: { hitl_mode: "on_threshold", budget_usd: 10 },
    state: {
      status: "ACTIVE",
      budget_initial_usd: 10,
      budget_remaining_usd: 5,
      pending_transition: {
        decision: "approve",
        original_nonce: nonce,
        original_args_digest: canonicalHash(params),
        terminal_status: "pending",
      },
    },
    call: { tool_name: "send_email", params, nonce },
    expectedVerdict: "ALLOW",
    expectedReason: "hitl_transition:approve",
    kind: "hitl_approval",
    label: `hitl_approval:${n}`,
  };
}

/** A fifth: an ordinary call under a budget and a repeat limit that nothing stops. */
function plainAllow(random: () => number, n: number): CorpusCase {
  return {
    config: { budget_usd: 10, max_repeat_calls: 5 },
    state: {
      budget_initial_usd: 10,
      budget_remaining_usd: 9,
      repeat_counts: { search: 1 },
      last_tool_name: "search",
      seen_nonces: [`old-${n}`],
    },
    call: {
      tool_name: random() < 0.5 ? "search" : "fetch",
      params: { q: `${WORDS[n % WORDS.length]} ${n}`, page: n % 5 },
      nonce: `n-${n}`,
      estimated_cost_usd: 0.01,
    },
    expectedVerdict: "ALLOW",
    expectedReason: "within_thresholds",
    kind: "plain_allow",
    label: `plain_allow:${n}`,
  };
}

/** The rest: the published vectors (every certified reason) in turn. */
function fromFixture(vector: Vector): CorpusCase {
  return {
    config: vector.config,
    state: vector.state,
    call: vector.call,
    expectedVerdict: vector.expectedVerdict,
    expectedReason: vector.expectedReason,
    kind: "fixture",
    label: vector.name,
  };
}

/**
 * `size` cases from `seed`: a fifth HITL approvals, a fifth plain ALLOWs, the rest the published
 * vectors (`vectors`) in turn, shuffled together. Every case is checked against its expected outcome.
 * @throws Error naming the first case decide() answers otherwise.
 */
export function mixedCorpus(vectors: readonly Vector[], size = 4000, seed = 20): CorpusCase[] {
  const random = seeded(seed);
  const cases: CorpusCase[] = [];
  const fifth = Math.floor(size / 5);
  for (let i = 0; i < fifth; i++) cases.push(hitlApproval(random, i));
  for (let i = 0; i < fifth; i++) cases.push(plainAllow(random, i));
  for (let i = 0; cases.length < size; i++) cases.push(fromFixture(vectors[i % vectors.length]!));
  for (let i = cases.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [cases[i], cases[j]] = [cases[j]!, cases[i]!];
  }
  for (const [i, c] of cases.entries()) {
    const { verdict, reason } = decide(c.config, c.state, c.call);
    if (verdict !== c.expectedVerdict || reason !== c.expectedReason) {
      throw new Error(
        `mixed corpus case ${i} (${c.kind}): expected ${c.expectedVerdict} ${c.expectedReason}, got ${verdict} ${reason}`,
      );
    }
  }
  return cases;
}

/** How many cases of each reason the corpus holds. */
export function reasonCounts(cases: readonly CorpusCase[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const c of cases) out[c.expectedReason] = (out[c.expectedReason] ?? 0) + 1;
  return out;
}
