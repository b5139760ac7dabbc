// What a receipt is: the compact JWS (RFC 7515) of a signed chain entry — protected header,
// body as payload, the entry's own signature. Building one signs nothing; @leash/chain already did.

import type { ChainEntryRecord } from "@leash/core";
import { base64url } from "jose";
import { ReceiptError } from "./errors.js";

/** The JWS protected header of every receipt, byte for byte in this key order. */
export function receiptHeader(keyId: string): string {
  if (typeof keyId !== "string" || !/^[0-9a-f]{16}$/.test(keyId)) {
    throw new ReceiptError("invalid_argument", "key_id must be 16 lowercase hex characters");
  }
  return `{"alg":"EdDSA","kid":"${keyId}"}`;
}

/**
 * The receipt of a chain entry: BASE64URL(header) "." BASE64URL(body) "." signature. It equals
 * jwsOf(entry) from @leash/chain; this copy keeps receipts free of the chain package.
 * @throws ReceiptError "invalid_argument" for a malformed entry.
 */
export function receiptOf(entry: Pick<ChainEntryRecord, "body" | "signature" | "key_id">): string {
  if (typeof entry?.body !== "string" || typeof entry.signature !== "string") {
    throw new ReceiptError("invalid_argument", "an entry needs a string body and a base64url signature");
  }
  return `${base64url.encode(receiptHeader(entry.key_id))}.${base64url.encode(entry.body)}.${entry.signature}`;
}
