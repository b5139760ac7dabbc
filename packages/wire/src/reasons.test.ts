import { ALL_REASONS } from "@leash/core";
import { describe, expect, it } from "vitest";
import { DenyReason, Verdict } from "./gen/shackle/sp1/shackle_pb.js";
import { denyReasonFor, verdictFromWire, verdictToWire } from "./reasons.js";

describe("reasons and verdicts on the wire", () => {
  it("every reason core knows has a DenyReason of its own (NONE only for ALLOW reasons)", () => {
    const allow = new Set([
      "within_thresholds",
      "hitl_transition:approve",
      "hitl_transition:modify_successor",
    ]);
    for (const reason of ALL_REASONS) {
      const value = denyReasonFor(reason);
      expect(value, reason).not.toBe(DenyReason.OTHER);
      expect(value === DenyReason.NONE, reason).toBe(allow.has(reason));
    }
    expect(denyReasonFor("hitl_on_deny:window_exceeded")).toBe(DenyReason.WINDOW_EXCEEDED);
    expect(denyReasonFor("probabilistic_deny")).toBe(DenyReason.BUDGET_EXHAUSTED);
    expect(denyReasonFor("policy_violation:tool_denied")).toBe(DenyReason.TOOL_DENIED);
    expect(denyReasonFor("something_new")).toBe(DenyReason.OTHER);
    expect(denyReasonFor("__proto__")).toBe(DenyReason.OTHER);
  });

  it("verdicts round-trip; an unknown or unset verdict is DENY", () => {
    for (const v of ["ALLOW", "DENY", "HITL"] as const) expect(verdictFromWire(verdictToWire(v))).toBe(v);
    expect(verdictFromWire(Verdict.VERDICT_UNSPECIFIED)).toBe("DENY");
    expect(verdictFromWire(42 as Verdict)).toBe("DENY");
  });
});
