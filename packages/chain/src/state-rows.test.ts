// Row digests: what an entry's `row_digests` names (docs/chain-format.md "Row digests") and how its
// shape is checked beside the kind's own schema.
import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { checkEventData } from "./events/index.js";
import { parseRowKey, rowDigest, rowDigestsOf, rowKey } from "./state-rows.js";

describe("row digests", () => {
  it("hash the row without its stamp (and a session's heartbeat), in canonical JSON, big integers as digits", () => {
    const row = { account_id: "a", spent_usd: "1.5", created_ns: 1750000000000000000, at_seq: 4 };
    const text =
      '{"row":{"account_id":"a","created_ns":"1750000000000000000","spent_usd":"1.5"},"table":"budget_accounts"}';
    expect(rowDigest("budget_accounts", row)).toBe(createHash("sha256").update(text).digest("hex"));
    expect(rowDigest("budget_accounts", { ...row, at_seq: 9 })).toBe(rowDigest("budget_accounts", row));
    expect(rowDigest("budget_accounts", { ...row, spent_usd: "0" })).not.toBe(
      rowDigest("budget_accounts", row),
    );
    const session = { session_id: "s", state: { circuit_tripped: true }, last_heartbeat_ns: 1 };
    expect(rowDigest("sessions", { ...session, last_heartbeat_ns: 2 })).toBe(rowDigest("sessions", session));
    expect(rowDigest("sessions", session)).not.toBe(rowDigest("hitl_requests", session));
  });

  it("key rows by table and id, the first colon ending the table", () => {
    expect(rowKey("budget_accounts", "agent:acme/bot")).toBe("budget_accounts:agent:acme/bot");
    expect(parseRowKey("budget_accounts:agent:acme/bot")).toEqual({
      table: "budget_accounts",
      id: "agent:acme/bot",
    });
    expect(parseRowKey("nonces:x")).toBeNull();
  });

  it("are checked beside every kind's schema: well formed passes, malformed is named", () => {
    const data = { session_id: "s", operator_id: "alice", trip_reason: null };
    const digest = "0".repeat(64);
    expect(checkEventData("circuit_reset", data)).toBeNull();
    expect(checkEventData("circuit_reset", { ...data, row_digests: { "sessions:s": digest } })).toBeNull();
    expect(checkEventData("circuit_reset", { ...data, row_digests: { "sessions:s": "x" } })).toMatchObject({
      pointer: "/data/row_digests",
    });
    expect(checkEventData("circuit_reset", { ...data, row_digests: { "chain:1": digest } })).toMatchObject({
      pointer: "/data/row_digests",
    });
    expect(rowDigestsOf({ row_digests: { "sessions:s": digest } })).toEqual({ "sessions:s": digest });
    expect(rowDigestsOf({})).toBeUndefined();
    expect(rowDigestsOf({ row_digests: [] })).toBeNull();
  });
});
