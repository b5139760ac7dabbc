// The one error family @leash/outbox throws: bad arguments, and a store that breaks the outbox's invariant.
// Storage failures stay SubstrateErrors (code and cause intact); they are not wrapped here.
import { LeashBaseError } from "@leash/core";

export type OutboxErrorCode =
  /** An argument is malformed: a relay id that is empty, a limit or lease that is not a positive integer. */
  | "invalid_argument"
  /**
   * A queued item has no chain entry, or one with another entry_id. Append and enqueue share a
   * transaction, so this only happens to a damaged store; the claim is rolled back, never half-served.
   */
  | "corrupt";

/** Every error this package throws; `code` is stable and meant for programs, `message` for people. */
export class OutboxError extends LeashBaseError<OutboxErrorCode> {
  static override readonly marker: symbol = Symbol.for("leash.outbox.error");
  static override readonly legacyCodes = { invalid_argument: "invalid_input" };
  override readonly name: string = "OutboxError";
}
