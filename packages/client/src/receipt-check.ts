// Checks a verdict's receipt before the client acts on it: signed by the daemon's key, and binding
// this session, call, tool, params, nonce and verdict, so a forged or replayed ALLOW cannot pass.
import { verifyReceipt } from "@leash/receipts";

export interface ExpectedDecision {
  session_id: string;
  call_number: number;
  tool_name: string;
  /** Hex digest the client computed, or null when the params had no canonical form. */
  params_hash: string | null;
  nonce: string;
  verdict: string;
  reason: string;
  entry_hash: string;
  entry_seq: number;
}

/** null when the receipt verifies and binds `expected`; otherwise why not (one line). */
export async function receiptProblem(
  receipt: string,
  publicKey: string,
  expected: ExpectedDecision,
): Promise<string | null> {
  if (receipt === "") return "the verdict carries no receipt";
  const verified = await verifyReceipt(receipt, publicKey);
  if (!verified.ok) return `the receipt does not verify (${verified.reason}: ${verified.message})`;
  if (verified.payload.kind !== "decision")
    return `the receipt is a ${verified.payload.kind} entry, not a decision`;
  if (verified.entry_hash !== expected.entry_hash) return "the receipt is not of the entry the verdict names";
  if (verified.seq !== expected.entry_seq) return "the receipt's chain position differs from the verdict's";
  const data = verified.payload.data;
  const bound: Array<[string, unknown, unknown]> = [
    ["session_id", data.session_id, expected.session_id],
    ["call_number", data.call_number, expected.call_number],
    ["tool_name", data.tool_name, expected.tool_name],
    ["verdict", data.verdict, expected.verdict],
    ["reason", data.reason, expected.reason],
    // The nonce is recorded as the daemon read it (number or decimal text); compare the text.
    ["nonce", data.nonce === null || data.nonce === undefined ? null : String(data.nonce), expected.nonce],
  ];
  if (expected.params_hash !== null) bound.push(["params_hash", data.params_hash, expected.params_hash]);
  for (const [field, got, want] of bound) {
    if (got !== want) return `the receipt's ${field} is ${JSON.stringify(got)}, not ${JSON.stringify(want)}`;
  }
  return null;
}
