// The JSON Schema of each chain entry kind's `data`, one per version: what docs/chain-format.md
// documents and `checkEventData` enforces. Plain objects, no validator here (see ./check.ts).

/** A JSON Schema object (draft 2020-12 subset: what these schemas use). */
export type JsonSchema = { readonly [keyword: string]: unknown };

const SCHEMA_BASE = "https://leash.dev/schemas/chain";

const string = { type: "string" } as const;
const nonEmpty = { type: "string", minLength: 1 } as const;
const nullableString = { type: ["string", "null"] } as const;
const count = { type: "integer", minimum: 0 } as const;
/** Lowercase hex SHA-256. */
const hash = { type: "string", pattern: "^[0-9a-f]{64}$" } as const;
/** Exact decimal money, never a binary float: "0", "4.25", "-0.1". */
const money = { type: "string", pattern: "^-?(0|[1-9][0-9]*)(\\.[0-9]+)?$" } as const;
const nullableMoney = { anyOf: [money, { type: "null" }] } as const;
/** Nanoseconds since the epoch: an integer within 2^53, else its exact decimal digits. */
const ns = { anyOf: [count, { type: "string", pattern: "^(0|[1-9][0-9]*)$" }] } as const;
const nullableNs = { anyOf: [...ns.anyOf, { type: "null" }] } as const;
/** An SP/1.0 nonce: a string or an integer, null when the call gave none. */
const nonce = { type: ["string", "integer", "null"] } as const;

/** One version of one kind's data schema. */
export interface EventSchemaVersion {
  readonly version: number;
  readonly schema: JsonSchema;
}

function closed(
  kind: string,
  version: number,
  title: string,
  properties: Record<string, JsonSchema>,
  optional: readonly string[] = [],
): EventSchemaVersion {
  return {
    version,
    schema: {
      $id: `${SCHEMA_BASE}/${kind}/v${version}.json`,
      title,
      type: "object",
      properties,
      required: Object.keys(properties).filter((k) => !optional.includes(k)),
      additionalProperties: false,
    },
  };
}

/**
 * The version before `current`, for entries written before its newer fields existed: an entry that
 * lacks one of the current required fields is checked against the fields it has always had (typed
 * as now), and may carry fields since retired. An entry with every current field is the current one.
 */
function earlier(kind: string, version: number, current: EventSchemaVersion, always: readonly string[]) {
  const schema = current.schema as { title: string; properties: object; required: string[] };
  return {
    version,
    schema: {
      $id: `${SCHEMA_BASE}/${kind}/v${version}.json`,
      title: `${schema.title} (before v${current.version})`,
      type: "object",
      properties: schema.properties,
      required: always,
      not: { required: schema.required },
    },
  } satisfies EventSchemaVersion;
}

const decisionV2 = closed(
  "decision",
  2,
  "A verdict on one tool call (replay inputs version 2)",
  {
    session_id: nonEmpty,
    agent_id: nullableString,
    organization_id: nullableString,
    call_number: count,
    tool_name: nullableString,
    params_hash: { anyOf: [hash, { type: "null" }] },
    nonce,
    estimated_cost_usd: { type: ["number", "string", "null"] },
    estimate_usd: nullableMoney,
    input_problem: string,
    verdict: { enum: ["ALLOW", "DENY", "HITL"] },
    reason: nonEmpty,
    budget_before_usd: nullableMoney,
    budget_after_usd: nullableMoney,
    reservation_id: nullableString,
    rng: { type: "number", minimum: 0, maximum: 1 },
    previous_error: string,
    now_ns: ns,
    replay_inputs: { const: 2 },
    params_json: nullableString,
    expected_params_hash: string,
    hitl_request_id: nonEmpty,
    hold_ttl_ns: count,
  },
  ["input_problem", "rng", "previous_error", "expected_params_hash", "hitl_request_id", "hold_ttl_ns"],
);

const policyVerdict = { enum: ["ALLOW", "DENY", "HITL"] } as const;

/**
 * What a decision records of the operator's policy layer (@leash/engine's StoredPolicyRecord): compact
 * (no `hash`, no empty `monitor` / `counted`; a default ALLOW only `counted`); older entries carry
 * `verdict`, `rule`, `reason` always and `counter_updates` (some `hash` too), which stays valid.
 */
const policyRecord = {
  type: "object",
  properties: {
    hash,
    verdict: policyVerdict,
    rule: nullableString,
    reason: nonEmpty,
    monitor: {
      type: "array",
      items: {
        type: "object",
        properties: { rule: nonEmpty, would: nonEmpty, reason: nonEmpty },
        required: ["rule", "would", "reason"],
        additionalProperties: false,
      },
    },
    counter_updates: {
      type: "array",
      items: {
        type: "object",
        properties: { key: nonEmpty, start: { type: "integer" }, end: { type: "integer" }, add: count },
        required: ["key", "start", "end", "add"],
        additionalProperties: false,
      },
    },
    // A rate rule's index, or [a budget rule's index, micro-dollars].
    counted: {
      type: "array",
      minItems: 1,
      items: {
        anyOf: [
          count,
          { type: "array", items: [count, count], minItems: 2, maxItems: 2, additionalItems: false },
        ],
      },
    },
    approved: { const: true },
  },
  // Either the verdict in full, or (a default ALLOW) only what it counted.
  anyOf: [{ required: ["verdict", "rule", "reason"] }, { required: ["counted"] }],
  not: { required: ["counted", "counter_updates"] },
  additionalProperties: false,
} as const;

/**
 * Replay inputs version 3: exactly one of `params_json` (inline), `params_bytes` (over the guard's
 * cap: size alone) and `params_blob` (stored by digest beside the entry).
 */
const decisionV3Closed = closed(
  "decision",
  3,
  "A verdict on one tool call (replay inputs version 3)",
  {
    ...(decisionV2.schema.properties as Record<string, JsonSchema>),
    replay_inputs: { const: 3 },
    params_bytes: { type: "integer", minimum: 0 },
    params_blob: { const: true },
    // Written by an engine with a policy: the version in force and what it judged (null when the call
    // was refused before the policy ran; absent when it allowed by default with nothing to say).
    policy_hash: hash,
    policy: { anyOf: [policyRecord, { type: "null" }] },
  },
  [
    "input_problem",
    "rng",
    "previous_error",
    "expected_params_hash",
    "hitl_request_id",
    "hold_ttl_ns",
    "params_json",
    "params_bytes",
    "params_blob",
    "policy_hash",
    "policy",
  ],
);
const decisionV3: EventSchemaVersion = {
  version: 3,
  schema: {
    ...decisionV3Closed.schema,
    oneOf: [{ required: ["params_json"] }, { required: ["params_bytes"] }, { required: ["params_blob"] }],
    // `policy` only with `policy_hash` (which may stand alone).
    anyOf: [{ required: ["policy_hash"] }, { not: { required: ["policy"] } }],
  },
};

/** Decisions before replay inputs version 2: an open record around the SP/1.0 audit fields. */
const decisionV1: EventSchemaVersion = {
  version: 1,
  schema: {
    $id: `${SCHEMA_BASE}/decision/v1.json`,
    title: "A verdict on one tool call (no replay inputs, or replay inputs version 1)",
    type: "object",
    properties: {
      session_id: nonEmpty,
      agent_id: nullableString,
      organization_id: nullableString,
      call_number: { type: ["integer", "null"], minimum: 0 },
      tool_name: nullableString,
      params_hash: { anyOf: [hash, { type: "null" }] },
      nonce,
      verdict: { enum: ["ALLOW", "DENY", "HITL"] },
      reason: nonEmpty,
      budget_before_usd: nullableMoney,
      budget_after_usd: nullableMoney,
      replay_inputs: { const: 1 },
    },
    required: ["session_id", "verdict", "reason"],
  },
};

const hitlRequestV2 = closed("hitl_request", 2, "A call paused for a human", {
  session_id: nonEmpty,
  request_id: nonEmpty,
  call_number: count,
  tool_name: string,
  nonce,
  args_digest: hash,
  reason: nonEmpty,
  budget_spent_usd: nullableMoney,
  budget_limit_usd: nullableMoney,
  budget_remaining_usd: nullableMoney,
  policy_id: hash,
  created_ns: ns,
  expires_ns: ns,
});

const hitlDecisionV2 = closed(
  "hitl_decision",
  2,
  "A human's answer to a paused call",
  {
    session_id: nonEmpty,
    request_id: nonEmpty,
    call_number: count,
    tool_name: string,
    decision: { enum: ["approve", "reject", "modify", "defer", "escalate"] },
    operator_id: nonEmpty,
    nonce,
    args_digest: hash,
    successor: {
      anyOf: [
        { type: "null" },
        {
          type: "object",
          properties: { nonce: { type: ["string", "integer"] }, args_digest: hash },
          required: ["nonce", "args_digest"],
          additionalProperties: false,
        },
      ],
    },
    comment: string,
  },
  ["comment"],
);

const hitlExpiredV2 = closed("hitl_expired", 2, "A paused call nobody answered in time", {
  session_id: nonEmpty,
  request_id: nonEmpty,
  call_number: count,
  tool_name: string,
  nonce,
  args_digest: hash,
  operator_id: nonEmpty,
  expires_ns: ns,
  now_ns: ns,
});

const postExecV2 = closed(
  "post_exec",
  2,
  "A call's actual cost, settling its hold",
  {
    session_id: nonEmpty,
    call_number: count,
    reservation_id: nonEmpty,
    estimated_usd: money,
    actual_usd: money,
    overrun_usd: money,
    success: { type: "boolean" },
    error_message: string,
    budget_after_usd: money,
    late: { type: "boolean" },
    hold_status: { enum: ["PENDING", "SETTLED", "EXPIRED", "RELEASED"] },
    over_limit_usd: money,
    idempotency_key: nonEmpty,
  },
  ["error_message"],
);

const sessionRegisteredV1 = closed("session_registered", 1, "A session opened with its config", {
  session_id: nonEmpty,
  agent_id: nonEmpty,
  organization_id: nonEmpty,
  // The SP/1.0 session config as registered (its own schema: @leash/core's config schema).
  config: { type: "object" },
});

const circuitResetV2 = closed("circuit_reset", 2, "An operator closed a session's tripped circuit", {
  session_id: nonEmpty,
  operator_id: nonEmpty,
  trip_reason: nullableString,
});

const sessionStaleV2 = closed("session_stale", 2, "A session that missed its heartbeats", {
  session_id: nonEmpty,
  agent_id: nullableString,
  organization_id: nullableString,
  previous_status: { enum: ["ACTIVE", "PAUSED"] },
  last_heartbeat_ns: nullableNs,
  last_seen_ns: ns,
  heartbeat_interval_ms: { type: ["integer", "null"], minimum: 0 },
  missed_heartbeats: { type: ["integer", "null"], minimum: 0 },
  now_ns: ns,
  reason: { const: "heartbeat_timeout" },
});

const sessionRevivedV1 = closed("session_revived", 1, "A stale session heard from again", {
  session_id: nonEmpty,
});

const guardCreatedV1 = closed("guard_created", 1, "A shared budget (guard) opened", {
  guard_id: nonEmpty,
  parent_guard_id: nullableString,
  limit_usd: money,
});

const settledByExpiryV1 = closed(
  "settled_by_expiry",
  1,
  "An ALLOWed call's hold charged at its estimate once its TTL passed unsettled",
  {
    session_id: nonEmpty,
    call_number: count,
    reservation_id: nonEmpty,
    charged_usd: money,
    budget_after_usd: money,
  },
);

/** Written before settled_by_expiry (which replaced it): an expired hold given back. */
const reservationExpiredV1: EventSchemaVersion = {
  version: 1,
  schema: {
    $id: `${SCHEMA_BASE}/reservation_expired/v1.json`,
    title: "An expired hold released (written before settled_by_expiry replaced it)",
    type: "object",
    properties: {
      session_id: nonEmpty,
      call_number: count,
      reservation_id: nonEmpty,
      released_usd: money,
    },
    required: ["reservation_id"],
  },
};

const keyRotationV1 = closed(
  "key_rotation",
  1,
  "Signing handed to the next key",
  {
    next_key_id: { type: "string", pattern: "^[0-9a-f]{16}$" },
    next_public_key: hash,
    operator_id: nonEmpty,
  },
  ["operator_id"],
);

const snapshotRepairedV1 = closed("snapshot_repaired", 1, "Store rows rewritten from a replay of the chain", {
  chain_count: count,
  chain_head_hash: { anyOf: [hash, { type: "null" }] },
  repaired: { type: "array", items: string },
  left: { type: "array", items: string },
});

const rollbackAcceptedV1 = closed(
  "rollback_accepted",
  1,
  "An operator accepted a store restored to an older (or forked) chain",
  {
    operator_id: nonEmpty,
    rollback: { enum: ["behind", "forked"] },
    checkpoint_count: count,
    checkpoint_head_hash: hash,
    store_count: count,
    store_head_hash: { anyOf: [hash, { type: "null" }] },
  },
);

const policyPublishedV1 = closed("policy_published", 1, "A policy version put in force", {
  policy_hash: hash,
  name: nonEmpty,
  // The policy document with its defaults filled in, as canonical JSON; policy_hash is its SHA-256.
  canonical: nonEmpty,
});

/** Every kind the engine and recovery write or have written, newest version first. */
export const EVENT_SCHEMAS = {
  decision: [decisionV3, decisionV2, decisionV1],
  hitl_request: [hitlRequestV2, earlier("hitl_request", 1, hitlRequestV2, ["session_id", "request_id"])],
  hitl_decision: [
    hitlDecisionV2,
    earlier("hitl_decision", 1, hitlDecisionV2, ["session_id", "request_id", "decision", "operator_id"]),
  ],
  hitl_expired: [hitlExpiredV2, earlier("hitl_expired", 1, hitlExpiredV2, ["session_id", "request_id"])],
  post_exec: [postExecV2, earlier("post_exec", 1, postExecV2, ["session_id", "call_number"])],
  session_registered: [sessionRegisteredV1],
  circuit_reset: [circuitResetV2, earlier("circuit_reset", 1, circuitResetV2, ["session_id"])],
  session_stale: [sessionStaleV2, earlier("session_stale", 1, sessionStaleV2, ["session_id"])],
  session_revived: [sessionRevivedV1],
  guard_created: [guardCreatedV1],
  settled_by_expiry: [settledByExpiryV1],
  reservation_expired: [reservationExpiredV1],
  key_rotation: [keyRotationV1],
  snapshot_repaired: [snapshotRepairedV1],
  rollback_accepted: [rollbackAcceptedV1],
  policy_published: [policyPublishedV1],
} as const satisfies Record<string, readonly EventSchemaVersion[]>;

export type ChainEventKind = keyof typeof EVENT_SCHEMAS;

/** The kinds writers still write; `reservation_expired` is read only. */
export const WRITTEN_KINDS = Object.keys(EVENT_SCHEMAS).filter(
  (k) => k !== "reservation_expired",
) as ChainEventKind[];
