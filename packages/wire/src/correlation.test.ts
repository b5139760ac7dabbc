import { create } from "@bufbuild/protobuf";
import { describe, expect, it, vi } from "vitest";
import { PendingRequests } from "./correlation.js";
import { WireError } from "./errors.js";
import { EnvelopeSchema } from "./gen/shackle/sp1/shackle_pb.js";

const reply = (correlationId: string, n: number) =>
  create(EnvelopeSchema, { correlationId, payload: { case: "heartbeatAck", value: { sessionId: `s${n}` } } });

describe("PendingRequests", () => {
  it("pairs responses arriving out of order with their requests", async () => {
    const p = new PendingRequests();
    const a = p.wait("a");
    const b = p.wait("b");
    const c = p.wait("c");
    expect(p.size).toBe(3);
    expect(p.settle(reply("c", 3))).toBe(true);
    expect(p.settle(reply("a", 1))).toBe(true);
    expect(p.settle(reply("b", 2))).toBe(true);
    const got = await Promise.all([a, b, c]);
    expect(got.map((e) => (e.payload.case === "heartbeatAck" ? e.payload.value.sessionId : ""))).toEqual([
      "s1",
      "s2",
      "s3",
    ]);
    expect(p.size).toBe(0);
  });

  it("reports an answer nobody waits for, refuses a duplicate or empty id", () => {
    const p = new PendingRequests();
    expect(p.settle(reply("nobody", 0))).toBe(false);
    p.wait("x").catch(() => {});
    expect(() => p.wait("x")).toThrow(WireError);
    expect(() => p.wait("")).toThrow(/empty or in flight/);
    p.failAll();
  });

  it("times out, and a late answer is then unmatched", async () => {
    vi.useFakeTimers();
    try {
      const p = new PendingRequests();
      const r = p.wait("slow", { timeoutMs: 100 });
      const caught = r.catch((e: unknown) => e);
      vi.advanceTimersByTime(101);
      const error = await caught;
      expect(WireError.isInstance(error) && error.code).toBe("request_timeout");
      expect(p.settle(reply("slow", 1))).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });

  it("failAll rejects everything in flight", async () => {
    const p = new PendingRequests();
    const all = [p.wait("1"), p.wait("2")].map((r) => r.catch((e: unknown) => (e as WireError).code));
    p.failAll();
    expect(await Promise.all(all)).toEqual(["connection_closed", "connection_closed"]);
  });
});
