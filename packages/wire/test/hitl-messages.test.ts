// The HITL additions to the proto: numbered as Leash additions (≥ 100), JSON round trips for the
// console's WebSocket (§6.3), and WaitHitl a server stream. It does not test any daemon behaviour.
import { create, fromJson, fromJsonString, toJson, toJsonString } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import * as pb from "../src/index.js";

const HITL_MESSAGES = [
  pb.HitlBudgetSchema,
  pb.HitlVerdictSummarySchema,
  pb.HitlRequestViewSchema,
  pb.HitlDecisionSchema,
  pb.ListHitlRequestSchema,
  pb.ListHitlResponseSchema,
  pb.GetHitlRequestSchema,
  pb.AnswerHitlRequestSchema,
  pb.WaitHitlRequestSchema,
  pb.HitlUpdateSchema,
  pb.ConsoleHelloSchema,
  pb.ConsoleRequestSchema,
  pb.ConsoleEventSchema,
];

describe("HITL messages", () => {
  it("number every field of the new messages from 100", () => {
    for (const schema of HITL_MESSAGES) {
      for (const field of schema.fields) {
        expect(field.number, `${schema.typeName}.${field.name}`).toBeGreaterThanOrEqual(100);
      }
    }
  });

  it("add to existing messages only with numbers from 100", () => {
    expect(pb.EnvelopeSchema.field.waitHitl?.number).toBe(103);
    expect(pb.EnvelopeSchema.field.hitlUpdate?.number).toBe(104);
    expect(pb.PreExecResponseSchema.field.hitlRequestId?.number).toBe(105);
    expect(pb.PreExecResponseSchema.field.hitlExpiresNs?.number).toBe(106);
  });

  it("makes WaitHitl a server-streaming RPC", () => {
    expect(pb.ShackleDaemon.method.waitHitl.methodKind).toBe("server_streaming");
  });

  it("round-trips a console answer through its JSON form", () => {
    const request = create(pb.ConsoleRequestSchema, {
      correlationId: "c1",
      request: {
        case: "answer",
        value: {
          requestId: "r-1",
          decision: {
            kind: pb.HitlDecisionKind.HITL_DECISION_MODIFY,
            paramsJson: '{"to":"b"}',
            comment: "ok",
          },
        },
      },
    });
    const text = toJsonString(pb.ConsoleRequestSchema, request);
    expect(JSON.parse(text)).toEqual({
      correlationId: "c1",
      answer: {
        requestId: "r-1",
        decision: { kind: "HITL_DECISION_MODIFY", paramsJson: '{"to":"b"}', comment: "ok" },
      },
    });
    const back = fromJsonString(pb.ConsoleRequestSchema, text);
    expect(back.request.case).toBe("answer");
    expect(back.request.value).toEqual(request.request.value);
  });

  it("writes int64 times as JSON strings (exact past 2^53)", () => {
    const view = create(pb.HitlRequestViewSchema, { requestId: "r", expiresNs: 1_800_000_000_123_456_789n });
    const json = toJson(pb.HitlRequestViewSchema, view) as Record<string, unknown>;
    expect(json.expiresNs).toBe("1800000000123456789");
    expect(fromJson(pb.HitlRequestViewSchema, json).expiresNs).toBe(1_800_000_000_123_456_789n);
  });

  it("refuses an unknown decision name", () => {
    expect(() => fromJson(pb.HitlDecisionSchema, { kind: "HITL_DECISION_YOLO" } as never)).toThrow();
  });
});
