// The one error @leash/receipts throws: malformed input to receiptOf or to key conversion.
// A receipt that does not verify is a result ({ ok: false, reason }), never one of these errors.

export type ReceiptErrorCode =
  /** An argument is not what the function takes (a body that is not a string, a bad key id, …). */
  "invalid_input";

// Symbol.for, not a module-local Symbol: two copies of this package in one process must still agree.
const MARKER = Symbol.for("leash.receipts.error");

export class ReceiptError extends Error {
  readonly [MARKER] = true;
  override readonly name = "ReceiptError";
  readonly code: ReceiptErrorCode;

  constructor(code: ReceiptErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }

  static isInstance(error: unknown): error is ReceiptError {
    return typeof error === "object" && error !== null && (error as Record<symbol, unknown>)[MARKER] === true;
  }
}
