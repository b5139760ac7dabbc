// Public surface of @leash/substrate-contract: the one suite, its sections, and the helpers tests reuse.
// It is test-only code (it imports vitest); no runtime package depends on it.

export { defineBudgetContract } from "./budget.js";
export { budgetStoreContract } from "./budget-store.js";
export { chainStoreContract } from "./chain.js";
export { concurrencyContract } from "./concurrency.js";
export { conventionsContract } from "./conventions.js";
export {
  chainEntryId,
  GENESIS_PREV_HASH,
  MAX_SAFE_NS,
  makeAccount,
  makeChain,
  makeChainEntry,
  makeHitlRequest,
  makeReservation,
  makeSession,
  outboxItemFor,
  seedWorld,
  T0,
  WORLD,
} from "./fixtures.js";
export {
  byKey,
  CONCURRENCY_TIMEOUT_MS,
  type ContractHarness,
  expectSubstrateError,
  raceWindow,
  twoHandles,
  useHarness,
} from "./harness.js";
export { hitlStoreContract } from "./hitl.js";
export { messageStoreContract } from "./messages.js";
export { migrationContract } from "./migrations.js";
export { nextEntry, nonceStoreContract, spend, spendIn } from "./nonces.js";
export type { SubstrateContractOptions } from "./options.js";
export { outboxStoreContract } from "./outbox.js";
export { sessionStoreContract } from "./sessions.js";
export { snapshotStampsContract } from "./stamps.js";
export { defineSubstrateContract } from "./suite.js";
export { transactionContract } from "./transactions.js";
export { DECIMAL_SAMPLES, valuesContract } from "./values.js";
export { writeBatchContract } from "./write-batch.js";
