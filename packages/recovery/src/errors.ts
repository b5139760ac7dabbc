// The one error family @leash/recovery throws: a store that must not be served, and bad options.
// A problem found while recovering is first a line in the report; it becomes an error in assertRecovered.
import { LeashBaseError } from "@leash/core";

export type RecoveryErrorCode =
  /** The audit chain does not verify (edited, gap, reordered, inserted, bad signature, unknown key) or is shorter than its checkpoint. */
  | "chain_unverifiable"
  /** The store's chain is behind or forked from the checkpoint kept outside it: an older copy was restored. */
  | "chain_rolled_back"
  /** The checkpoint file exists but is not a checkpoint: a deleted tail could no longer be told from a short chain. */
  | "checkpoint_unreadable"
  /** The outbox names entries the chain does not hold (or holds with another id): a lost tail or a damaged store. */
  | "outbox_mismatch"
  /** The signer given is not the key in force at the chain's head: what it signed would not verify. */
  | "signer_mismatch"
  /** A verified entry records a verdict, state or amount that does not follow from the entries before it (replay). */
  | "replay_mismatch"
  /** The state tables (sessions, nonces, budget accounts, holds) are not the projection of the chain: edited or torn. */
  | "snapshot_mismatch"
  /** A shared budget's allotments break escrow's invariants (more allotted than the limit, a shard past its allotment). */
  | "escrow_violation"
  /** The store (or the checkpoint file) failed while recovering: unreachable, corrupt, closed; `cause` holds the original error. */
  | "store_failed"
  /** An option is malformed: no trusted key, a non-positive interval. */
  | "invalid_argument";

/** Every error this package throws; `code` is stable and meant for programs, `message` for people. */
export class RecoveryError extends LeashBaseError<RecoveryErrorCode> {
  static override readonly marker: symbol = Symbol.for("leash.recovery.error");
  static override readonly legacyCodes = { invalid_argument: "invalid_input" };
  override readonly name: string = "RecoveryError";
}
