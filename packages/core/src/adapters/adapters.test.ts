// deciderOf's refusal of what is neither an engine nor a client, and the words verdictMessage gives models.
// The adapters' behaviour with real engines, daemons and frameworks is tested in their own packages.
import { describe, expect, it } from "vitest";
import { DeciderError, type DeciderVerdict, deciderOf, type LeashLike, verdictMessage } from "../index.js";

const verdict = (v: DeciderVerdict["verdict"], reason: string): DeciderVerdict => ({
  session_id: "s",
  call_number: 4,
  verdict: v,
  reason,
  budget_remaining_usd: null,
  params_hash: null,
  entry_seq: 7,
  entry_hash: null,
  receipt: null,
});

describe("deciderOf", () => {
  it("refuses anything that is neither an engine nor a client, with a one-line error", () => {
    for (const junk of [{}, { evaluate: () => undefined }, { postExec: () => undefined }]) {
      const attempt = () => deciderOf(junk as unknown as LeashLike);
      expect(attempt).toThrow(DeciderError);
      expect(attempt).toThrow(/^deciderOf: expected a Leash engine/);
    }
  });

  it("tells an engine (may record approvals) from a daemon client (may not) by shape", () => {
    const call = async () => verdict("ALLOW", "within_thresholds");
    const engine = deciderOf({
      evaluate: call,
      postExec: async () => undefined,
      resume: async () => undefined,
      getSession: async () => ({ state: { pending_request: { request_id: "r1" } } }),
    });
    const client = deciderOf({ preExec: call, postExec: async () => undefined });
    expect([engine.mode, typeof engine.approve]).toEqual(["engine", "function"]);
    expect([client.mode, client.approve]).toEqual(["daemon", undefined]);
    expect(deciderOf(engine)).toBe(engine);
  });
});

describe("verdictMessage", () => {
  it("a DENY says why in words and by code, and not to retry unchanged", () => {
    expect(verdictMessage("search", verdict("DENY", "max_repeat_exceeded"))).toBe(
      "Leash denied search: the same call with the same arguments was repeated too many times " +
        "(max_repeat_exceeded); the tool did not run. Do not retry the same call unchanged.",
    );
  });

  it("a HITL names the request a human answers; an unknown reason is shown as its code", () => {
    expect(verdictMessage("deploy", verdict("HITL", "hitl_all_calls"), "req-9")).toContain(
      "Request req-9 waits for a human's decision.",
    );
    expect(verdictMessage("x", verdict("DENY", "some_future_reason"))).toContain(
      "Leash denied x: some_future_reason; the tool did not run.",
    );
    expect(verdictMessage("x", verdict("DENY", "fail_closed:timeout"))).toContain("could not get a verdict");
  });
});
