// A varied engine workload for the replay tests and bench: every entry kind the engine writes (decisions
// over many reasons, settlements, HITL answers, resets, expiries, stale/revived, a guard, a rotation).
import { generateKeyPair, type Signer } from "@leash/chain";
import type { Clock, Config } from "@leash/core";
import { createEngine, type Engine } from "@leash/engine";

/** A seeded PRNG (mulberry32): the same seed gives the same workload. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const CONFIGS: Config[] = [
  { budget_usd: 5, max_repeat_calls: 3 },
  { budget_usd: 1, default_estimate_usd: 0.05, hitl_budget_threshold: 0.5 },
  { hitl_mode: "always", hitl_timeout_s: 300 },
  {
    max_total_calls: 12,
    window_max_calls: 6,
    window_duration_s: 60,
    error_amplification: true,
    max_repeat_calls: 3,
  },
  { budget_usd: 2, probabilistic_deny: true, deny_jitter_ratio: 0.5, parent_guard_id: "team" },
  { budget_usd: 3, budget_scope: "agent" },
];

const TOOLS = ["search", "fetch", "write", "send"];

export interface Workload {
  engine: Engine;
  sessions: string[];
  steps: number;
}

/**
 * Drives `engine` for `steps` operations chosen by `random`: evaluate (often), postExec, resume, reset,
 * expire, stale/heartbeat. Refusals the engine throws (nothing to settle, no pending request) are part
 * of the workload: they record nothing.
 */
export async function runWorkload(
  engine: Engine,
  clock: Clock & { advanceMs(ms: number): void },
  random: () => number,
  steps: number,
): Promise<Workload> {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  await engine.createGuard({ guard_id: "team", limit_usd: 100 });
  const sessions: string[] = [];
  for (let i = 0; i < CONFIGS.length; i++) {
    const view = await engine.register({ agent_id: `agent-${i % 4}`, config: CONFIGS[i]! });
    sessions.push(view.session_id);
  }
  let nonce = 0;
  const allowed: { session_id: string; call_number: number }[] = [];
  for (let step = 0; step < steps; step++) {
    clock.advanceMs(Math.floor(random() * 2000));
    const sessionId = pick(sessions);
    const roll = random();
    try {
      if (roll < 0.6) {
        const replay = random() < 0.08 && nonce > 0;
        const params =
          random() < 0.1
            ? { ctx: "opaque" }
            : random() < 0.1
              ? { error: "rate limit exceeded", n: nonce }
              : { q: `é${"x".repeat(Math.floor(random() * 40))}`, nested: { n: nonce, list: [1, 2.5, "ü"] } };
        const r = await engine.evaluate({
          session_id: sessionId,
          tool_name: random() < 0.5 ? "search" : pick(TOOLS),
          params,
          nonce: replay ? `n${nonce - 1}` : `n${nonce++}`,
          ...(random() < 0.8 ? { estimated_cost_usd: pick([0.01, "0.1", 0.25, 0.5, 2]) } : {}),
          // The previous result's error (an input decide() sees for error amplification).
          ...(random() < 0.15 ? { previous_error: "HTTP 401 Unauthorized" } : {}),
        });
        if (r.verdict === "ALLOW") allowed.push({ session_id: sessionId, call_number: r.call_number });
      } else if (roll < 0.75 && allowed.length > 0) {
        const call = allowed.splice(Math.floor(random() * allowed.length), 1)[0]!;
        await engine.postExec({ ...call, actual_cost_usd: pick([0, 0.01, "0.2", 0.6]) });
      } else if (roll < 0.85) {
        await engine.resume({
          session_id: sessionId,
          decision: pick(["approve", "approve", "reject", "defer"] as const),
          operator_id: "op",
        });
      } else if (roll < 0.9) {
        await engine.reset(sessionId, "op");
      } else if (roll < 0.94) {
        clock.advanceMs(400_000);
        await engine.expireReservations();
        await engine.expireHitl();
      } else if (roll < 0.97) {
        await engine.markStale(sessionId, { staleAfterNs: 1 });
        if (random() < 0.5) await engine.heartbeat(sessionId); // back from STALE
      } else {
        for (const id of sessions) await engine.heartbeat(id); // revives the stale ones
      }
    } catch (error) {
      const code = (error as { code?: string }).code;
      const expected = [
        "no_pending_request",
        "reservation_not_found",
        "hitl_already_decided",
        "hitl_expired",
        "settlement_conflict",
      ];
      if (code === undefined || !expected.includes(code)) throw error;
    }
  }
  return { engine, sessions, steps };
}

/** An engine with a fresh key and a hand-moved clock, for a workload. */
export function workloadEngine(
  substrate: Parameters<typeof createEngine>[0]["substrate"],
  clock: Clock,
  signer: Signer = generateKeyPair().signer,
  rng: () => number = seededRandom(7),
): Engine {
  return createEngine({ substrate, signer, clock, rng, reservationTtlMs: 300_000 });
}
