// The tail additions to the proto: TailEntries a server stream on gRPC, tail_entries/tail_batch on the
// socket, numbered as Leash additions (≥ 100), and the optional fields that tell "absent" from 0 or "".
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import * as pb from "../src/index.js";
import { shackleGrpcService } from "../src/index.js";

describe("tail messages", () => {
  it("number every field from 100 and add to the Envelope only from 105", () => {
    for (const schema of [pb.TailRequestSchema, pb.TailEventSchema, pb.TailBatchSchema]) {
      for (const field of schema.fields) {
        expect(field.number, `${schema.typeName}.${field.name}`).toBeGreaterThanOrEqual(100);
      }
    }
    expect(pb.EnvelopeSchema.field.tailEntries?.number).toBe(105);
    expect(pb.EnvelopeSchema.field.tailBatch?.number).toBe(106);
  });

  it("makes TailEntries a server-streaming RPC at the ShackleDaemon path", () => {
    expect(pb.ShackleDaemon.method.tailEntries.methodKind).toBe("server_streaming");
    const method = shackleGrpcService().TailEntries!;
    expect(method.path).toBe("/shackle.sp1.ShackleDaemon/TailEntries");
    expect(method.responseStream).toBe(true);
  });

  it("tells an absent after_seq from -1 and 0, and an absent tool name from an empty one", () => {
    const round = (request: pb.TailRequest) =>
      fromBinary(pb.TailRequestSchema, toBinary(pb.TailRequestSchema, request));
    expect(round(create(pb.TailRequestSchema, { last: 10 })).afterSeq).toBeUndefined();
    expect(round(create(pb.TailRequestSchema, { afterSeq: -1n })).afterSeq).toBe(-1n);
    expect(round(create(pb.TailRequestSchema, { afterSeq: 0n })).afterSeq).toBe(0n);
    const event = fromBinary(
      pb.TailEventSchema,
      toBinary(pb.TailEventSchema, create(pb.TailEventSchema, { seq: 3n, kind: "decision", toolName: "" })),
    );
    expect(event.toolName).toBe("");
    expect(
      fromBinary(pb.TailEventSchema, toBinary(pb.TailEventSchema, create(pb.TailEventSchema, {}))).toolName,
    ).toBeUndefined();
  });
});
