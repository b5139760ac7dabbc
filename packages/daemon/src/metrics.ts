// The daemon's Prometheus metrics (prom-client), on a registry of its own so two daemons in one process
// never share counters. It records what happened; it decides nothing.
import { Counter, Gauge, Histogram, Registry } from "prom-client";

export interface DaemonMetrics {
  readonly registry: Registry;
  /** verdicts by verdict and exact reason. */
  readonly verdicts: Counter<"verdict" | "reason">;
  /** request handling time, seconds, per RPC. */
  readonly latency: Histogram<"rpc">;
  /** Error answers by Appendix B code and detail. */
  readonly errors: Counter<"code" | "detail">;
  /** Envelopes refused for authentication (bad HMAC, unknown key, replay, stale timestamp). */
  readonly authFailures: Counter<"detail">;
  /** Requests refused with RATE_LIMITED. */
  readonly rateLimited: Counter;
  /** Budget holds placed (ALLOW under a budget) and settled (postExec). */
  readonly holdsPlaced: Counter;
  readonly holdsSettled: Counter;
  readonly connections: Gauge;
  /** Connections closed, refused or paused, and requests refused, by the limit or quota that did it. */
  readonly limitRefusals: Counter<"limit">;
  /** Bytes of partial frames held across connections. */
  readonly bufferedBytes: Gauge;
  /**
   * Policy rules that decided a call (mode enforce: the verdict) or would have (mode monitor: the
   * would-be verdict), by rule; the default is rule "default".
   */
  readonly policyRules: Counter<"rule" | "verdict" | "mode">;
}

export function createMetrics(): DaemonMetrics {
  const registry = new Registry();
  const registers = [registry];
  return {
    registry,
    verdicts: new Counter({
      name: "leash_daemon_verdicts_total",
      help: "Verdicts answered, by verdict and exact reason",
      labelNames: ["verdict", "reason"],
      registers,
    }),
    latency: new Histogram({
      name: "leash_daemon_request_duration_seconds",
      help: "Time from a request's frame to its answer, per RPC",
      labelNames: ["rpc"],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    }),
    errors: new Counter({
      name: "leash_daemon_errors_total",
      help: "Error envelopes sent, by Appendix B code and detail",
      labelNames: ["code", "detail"],
      registers,
    }),
    authFailures: new Counter({
      name: "leash_daemon_auth_failures_total",
      help: "Envelopes refused for authentication, by detail",
      labelNames: ["detail"],
      registers,
    }),
    rateLimited: new Counter({
      name: "leash_daemon_rate_limited_total",
      help: "Requests refused with RATE_LIMITED",
      registers,
    }),
    holdsPlaced: new Counter({
      name: "leash_daemon_budget_holds_placed_total",
      help: "Budget holds placed by an ALLOW",
      registers,
    }),
    holdsSettled: new Counter({
      name: "leash_daemon_budget_holds_settled_total",
      help: "Budget holds settled by a postExec (retries counted once)",
      registers,
    }),
    connections: new Gauge({
      name: "leash_daemon_connections",
      help: "Open socket connections",
      registers,
    }),
    limitRefusals: new Counter({
      name: "leash_daemon_limit_refusals_total",
      help: "Connections closed, refused or paused and requests refused, by limit or quota",
      labelNames: ["limit"],
      registers,
    }),
    bufferedBytes: new Gauge({
      name: "leash_daemon_buffered_frame_bytes",
      help: "Bytes of partial frames held across socket connections",
      registers,
    }),
    policyRules: new Counter({
      name: "leash_daemon_policy_rule_verdicts_total",
      help: "Calls a policy rule decided (mode=enforce) or would have (mode=monitor), by rule and verdict",
      labelNames: ["rule", "verdict", "mode"],
      registers,
    }),
  };
}

/** Counts what the policy layer judged of one call: the deciding rule, and each monitor rule's would-be verdict. */
export function countPolicy(
  metrics: DaemonMetrics,
  policy:
    | {
        readonly rule: string | null;
        readonly verdict: string;
        readonly reason: string;
        readonly monitor: readonly { rule: string; would: string }[];
      }
    | null
    | undefined,
): void {
  if (policy === null || policy === undefined) return;
  if (policy.rule !== null || policy.reason === "policy_violation:default_deny") {
    metrics.policyRules.inc({ rule: policy.rule ?? "default", verdict: policy.verdict, mode: "enforce" });
  }
  for (const m of policy.monitor) {
    metrics.policyRules.inc({ rule: m.rule, verdict: m.would.split(" ")[0] ?? m.would, mode: "monitor" });
  }
}
