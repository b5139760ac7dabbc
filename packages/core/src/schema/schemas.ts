// JSON Schemas (draft-07, for ajv) of the config, state and call that enter Leash at its edges.
// decide() itself never needs them: it copes with any value. Files, CLI and wire input do.

const nonNegative = { type: "number", minimum: 0 } as const;
const count = { type: "integer", minimum: 0 } as const;
const nonce = { type: ["string", "integer", "null"] } as const;
const digest = { type: ["string", "null"] } as const;
const nanos = { type: ["integer", "null"] } as const;
/**
 * An estimate: a non-negative number or plain decimal text (read exactly, never through a float),
 * as @leash/budget-guard's readEstimate accepts it.
 */
const estimate = {
  type: ["number", "string"],
  minimum: 0,
  maxLength: 100,
  pattern: "^\\+?(\\d+(\\.\\d*)?|\\.\\d+)([eE][+-]?\\d{1,4})?$",
} as const;

export const configSchema = {
  $id: "leash:config",
  type: "object",
  additionalProperties: false,
  properties: {
    budget_usd: nonNegative,
    budget_scope: { enum: ["session", "agent", "organization"] },
    max_repeat_calls: count,
    error_amplification: { type: "boolean" },
    timeout_seconds: nonNegative,
    window_duration_s: nonNegative,
    window_max_calls: count,
    max_total_calls: count,
    probabilistic_deny: { type: "boolean" },
    deny_jitter_ratio: { type: "number", minimum: 0, maximum: 1 },
    hitl_mode: { enum: ["never", "on_deny", "on_threshold", "always"] },
    hitl_budget_threshold: { type: "number", minimum: 0, maximum: 1 },
    // Up to a year: an expiry past 2^63 ns would overflow the stores' integer columns.
    hitl_timeout_s: { type: "number", exclusiveMinimum: 0, maximum: 31_536_000 },
    parent_guard_id: { type: "string", minLength: 1 },
    default_estimate_usd: estimate,
    tool_estimates_usd: { type: "object", additionalProperties: estimate },
    denied_tools: {
      type: "array",
      items: { type: "string", minLength: 1 },
      uniqueItems: true,
      maxItems: 10_000,
    },
    // At most 64 MiB: params beyond that are no tool call, whatever the deployment.
    max_params_bytes: { type: "integer", minimum: 1, maximum: 67_108_864 },
  },
} as const;

export const pendingTransitionSchema = {
  type: ["object", "null"],
  properties: {
    decision: { type: "string" },
    original_nonce: nonce,
    original_args_digest: digest,
    successor_nonce: nonce,
    successor_args_digest: digest,
    terminal_status: { type: ["string", "null"] },
    resume_attempt: { type: "boolean" },
  },
} as const;

export const stateSchema = {
  $id: "leash:state",
  type: "object",
  properties: {
    status: { enum: ["ACTIVE", "PAUSED", "TERMINATED", "STALE"] },
    circuit_tripped: { type: "boolean" },
    circuit_trip_reason: { type: ["string", "null"] },
    circuit_tripped_at_ns: nanos,
    seen_nonces: { type: "array", items: { type: ["string", "integer"] } },
    budget_initial_usd: nonNegative,
    budget_remaining_usd: { type: "number" },
    budget_spent_usd: nonNegative,
    total_calls: count,
    repeat_counts: { type: "object", additionalProperties: count },
    window_counts: { type: "object", additionalProperties: count },
    window_start_ns: nanos,
    last_tool_name: { type: ["string", "null"] },
    last_tool_params_hash: digest,
    last_activity_ns: nanos,
    session_started_ns: nanos,
    pending_transition: pendingTransitionSchema,
    pending_request: { type: ["object", "null"] },
  },
} as const;

export const callSchema = {
  $id: "leash:call",
  type: "object",
  required: ["tool_name"],
  properties: {
    tool_name: { type: "string", minLength: 1 },
    params: { type: ["object", "null"] },
    nonce,
    estimated_cost_usd: nonNegative,
  },
} as const;

export const decideInputSchema = {
  $id: "leash:decide-input",
  type: "object",
  additionalProperties: false,
  required: ["config", "state", "call"],
  properties: {
    config: { $ref: "leash:config" },
    state: { $ref: "leash:state" },
    call: { $ref: "leash:call" },
    inputs: {
      type: "object",
      additionalProperties: false,
      properties: {
        nowNs: { type: "number" },
        rng: { type: "number", minimum: 0, maximum: 1 },
        errorText: { type: "string" },
      },
    },
  },
} as const;
