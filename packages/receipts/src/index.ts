// @leash/receipts: per-decision receipts — the compact JWS of a chain entry — and their verification.
// Node and browsers alike (jose over WebCrypto, no node: imports); signing happens in @leash/chain.

export { ReceiptError, type ReceiptErrorCode } from "./errors.js";
export { receiptHeader, receiptOf } from "./receipt.js";
export {
  type ReceiptFailureReason,
  type ReceiptPayload,
  type ReceiptPublicKey,
  receiptKeyId,
  type VerifyReceiptOptions,
  type VerifyReceiptResult,
  verifyReceipt,
} from "./verify.js";
