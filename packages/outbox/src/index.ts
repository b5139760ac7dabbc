// @leash/outbox: the transactional outbox protocol as typed helpers: enqueue, claim, settle, requeue DEAD.
// It delivers nothing (that is @leash/relay) and stores nothing (the substrates implement OutboxStore).

export { OutboxError, type OutboxErrorCode } from "./errors.js";
export {
  ackBatch,
  type ClaimBatchOptions,
  type ClaimedBatch,
  claimBatch,
  type DeferredItem,
  type EnqueueableEntry,
  enqueueEntry,
  failItem,
  type OutboxStats,
  outboxItemOf,
  outboxStats,
  type RequeueDeadOptions,
  requeueDead,
  type Settlement,
  settleBatch,
  systemClock,
} from "./outbox.js";
