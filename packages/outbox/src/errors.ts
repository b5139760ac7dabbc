// The one error family @leash/outbox throws: bad arguments, and a store that breaks the outbox's invariant.
// Storage failures stay SubstrateErrors (code and cause intact); they are not wrapped here.

export type OutboxErrorCode =
  /** An argument is malformed: a relay id that is empty, a limit or lease that is not a positive integer. */
  | "invalid_input"
  /**
   * A queued item has no chain entry, or one with another entry_id. Append and enqueue share a
   * transaction, so this only happens to a damaged store; the claim is rolled back, never half-served.
   */
  | "corrupt";

// Symbol.for, not a module-local Symbol: two copies of this package in one process must still
// recognise each other's errors.
const MARKER = Symbol.for("leash.outbox.error");

/** Every error @leash/outbox throws itself; `code` is stable and meant for programs, `message` for people. */
export class OutboxError extends Error {
  readonly [MARKER] = true;
  override readonly name = "OutboxError";
  readonly code: OutboxErrorCode;

  constructor(code: OutboxErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }

  static isInstance(error: unknown): error is OutboxError {
    return typeof error === "object" && error !== null && (error as Record<symbol, unknown>)[MARKER] === true;
  }
}
