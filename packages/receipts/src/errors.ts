// The one error @leash/receipts throws: malformed input to receiptOf or to key conversion.
// A receipt that does not verify is a result ({ ok: false, reason }), never one of these errors.
import { LeashBaseError } from "@leash/core";

export type ReceiptErrorCode =
  /** An argument is not what the function takes (a body that is not a string, a bad key id, …). */
  "invalid_argument";

export class ReceiptError extends LeashBaseError<ReceiptErrorCode> {
  static override readonly marker = Symbol.for("leash.receipts.error");
  static override readonly legacyCodes = { invalid_argument: "invalid_input" };
  override readonly name = "ReceiptError";
}
