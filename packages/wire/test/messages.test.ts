// Every SP/1.0 message survives binary and JSON round trips with every field set, and keeps the spec's numbers.
// The wire format itself is protobuf-es's; this checks the schema, not the library.

import { type DescMessage, equals, fromBinary, fromJson, toBinary, toJson } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import * as pb from "../src/gen/shackle/sp1/shackle_pb.js";
import { fill } from "./fill.js";

const MESSAGES: DescMessage[] = [
  pb.EnvelopeSchema,
  pb.RegisterRequestSchema,
  pb.RegisterResponseSchema,
  pb.PreExecRequestSchema,
  pb.PreExecResponseSchema,
  pb.PostExecNotificationSchema,
  pb.HeartbeatSchema,
  pb.HeartbeatAckSchema,
  pb.ErrorSchema,
  pb.GetSessionStateRequestSchema,
  pb.SessionStateSchema,
  pb.GuardConfigSchema,
  pb.AuditEntrySchema,
];

describe("round trip", () => {
  it.each(MESSAGES.map((m) => [m.typeName, m] as const))("%s: binary and JSON", (_name, schema) => {
    const message = fill(schema);
    const bytes = toBinary(schema, message);
    expect(equals(schema, fromBinary(schema, bytes), message)).toBe(true);
    expect(equals(schema, fromJson(schema, toJson(schema, message)), message)).toBe(true);
  });

  it.each(pb.EnvelopeSchema.oneofs[0]!.fields.map((f) => [f.name] as const))(
    "Envelope payload %s",
    (name) => {
      const envelope = fill(pb.EnvelopeSchema, 3, name);
      expect(envelope.payload.case).toBe(
        pb.EnvelopeSchema.oneofs[0]!.fields.find((f) => f.name === name)!.localName,
      );
      const back = fromBinary(pb.EnvelopeSchema, toBinary(pb.EnvelopeSchema, envelope));
      expect(equals(pb.EnvelopeSchema, back, envelope)).toBe(true);
    },
  );
});

describe("numbering", () => {
  // The spec's fields (§4, §5.1–5.2, §7.1): name → number. Everything else must be ≥ 100.
  const SPEC: Record<string, Record<string, number>> = {
    Envelope: {
      protocol_version: 1,
      message_id: 2,
      correlation_id: 3,
      client_timestamp_ns: 4,
      server_timestamp_ns: 5,
      hmac: 6,
      pre_exec: 10,
      pre_exec_response: 11,
      post_exec: 12,
      register: 13,
      register_response: 14,
      heartbeat: 15,
      heartbeat_ack: 16,
      error: 17,
    },
    RegisterRequest: {
      agent_id: 1,
      agent_version: 2,
      framework: 3,
      session_id: 4,
      organization_id: 5,
      runtime: 6,
      metadata: 7,
    },
    RegisterResponse: {
      session_id: 1,
      daemon_version: 2,
      negotiated_protocol: 3,
      active_config: 4,
      daemon_time_ns: 5,
    },
    PreExecRequest: {
      session_id: 1,
      call_number: 2,
      tool_name: 3,
      tool_params_hash: 4,
      estimated_cost_usd: 5,
      parent_guard_id: 6,
      nonce: 7,
      tags: 8,
    },
    PreExecResponse: {
      session_id: 1,
      call_number: 2,
      verdict: 3,
      deny_reason: 4,
      human_readable_reason: 5,
      budget_remaining_usd: 6,
      repeat_count: 7,
      daemon_time_ns: 8,
      probabilistic_deny: 9,
    },
    PostExecNotification: {
      session_id: 1,
      call_number: 2,
      actual_cost_usd: 3,
      success: 4,
      error_message: 5,
      duration_ms: 6,
      tokens_in: 7,
      tokens_out: 8,
      model_used: 9,
    },
    Heartbeat: { session_id: 1, last_call_number: 2, local_budget_remaining: 3 },
    HeartbeatAck: { session_id: 1, daemon_budget_remaining: 2, drift_detected: 3, daemon_time_ns: 4 },
    SessionState: {
      session_id: 1,
      agent_id: 2,
      organization_id: 3,
      status: 4,
      budget_initial_usd: 10,
      budget_remaining_usd: 11,
      budget_spent_usd: 12,
      total_calls: 20,
      repeat_counts: 21,
      window_counts: 22,
      circuit_tripped: 30,
      circuit_trip_reason: 31,
      circuit_tripped_at_ns: 32,
      window_start_ns: 40,
      window_duration_s: 41,
      window_max_calls: 42,
      last_tool_name: 50,
      last_tool_params_hash: 51,
      last_activity_ns: 52,
      metadata: 60,
    },
    GuardConfig: {
      budget_usd: 1,
      budget_scope: 2,
      max_repeat_calls: 10,
      error_amplification: 11,
      timeout_seconds: 20,
      window_duration_s: 30,
      window_max_calls: 31,
      max_total_calls: 40,
      probabilistic_deny: 50,
      deny_jitter_ratio: 51,
      hitl_mode: 60,
      hitl_budget_threshold: 61,
      parent_guard_id: 70,
    },
    AuditEntry: {
      entry_id: 1,
      timestamp_ns: 2,
      session_id: 3,
      agent_id: 4,
      organization_id: 5,
      call_number: 6,
      tool_name: 7,
      tool_params_hash: 8,
      verdict: 9,
      deny_reason: 10,
      budget_before_usd: 11,
      budget_after_usd: 12,
      operator_id: 13,
      signature: 14,
      previous_entry_hash: 15,
    },
  };

  it.each(Object.keys(SPEC))("%s keeps every spec field's number; additions are ≥ 100", (name) => {
    const schema = MESSAGES.find((m) => m.name === name)!;
    const spec = SPEC[name]!;
    for (const [field, number] of Object.entries(spec)) {
      expect(schema.fields.find((f) => f.name === field)?.number, `${name}.${field}`).toBe(number);
    }
    for (const f of schema.fields) {
      if (!(f.name in spec))
        expect(f.number, `${name}.${f.name} is a Leash addition`).toBeGreaterThanOrEqual(100);
    }
  });

  it("keeps the spec's enums as the spec numbers them", () => {
    expect([
      pb.SessionStatus.ACTIVE,
      pb.SessionStatus.PAUSED,
      pb.SessionStatus.TERMINATED,
      pb.SessionStatus.STALE,
    ]).toEqual([0, 1, 2, 3]);
    expect([pb.BudgetScope.PER_SESSION, pb.BudgetScope.PER_AGENT, pb.BudgetScope.PER_ORGANIZATION]).toEqual([
      0, 1, 2,
    ]);
    expect([
      pb.HitlMode.HITL_NEVER,
      pb.HitlMode.HITL_ON_DENY,
      pb.HitlMode.HITL_ON_BUDGET_THRESHOLD,
      pb.HitlMode.HITL_ALWAYS,
    ]).toEqual([0, 1, 2, 3]);
  });

  it("names the package and service as interoperable clients expect", () => {
    expect(pb.EnvelopeSchema.typeName).toBe("shackle.sp1.Envelope");
    expect(pb.ShackleDaemon.typeName).toBe("shackle.sp1.ShackleDaemon");
    expect(pb.ShackleDaemon.methods.map((m) => [m.name, m.input.name, m.output.typeName])).toEqual([
      ["Register", "RegisterRequest", "shackle.sp1.RegisterResponse"],
      ["PreExec", "PreExecRequest", "shackle.sp1.PreExecResponse"],
      ["PostExec", "PostExecNotification", "google.protobuf.Empty"],
      ["Heartbeat", "Heartbeat", "shackle.sp1.HeartbeatAck"],
      ["GetSessionState", "GetSessionStateRequest", "shackle.sp1.SessionState"],
      ["WaitHitl", "WaitHitlRequest", "shackle.sp1.HitlUpdate"],
      ["TailEntries", "TailRequest", "shackle.sp1.TailEvent"],
    ]);
  });
});
