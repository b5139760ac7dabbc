// defineSubstrateContract: registers the whole contract suite, every section, for one substrate.
// It opens nothing at definition time; each test takes its own fresh location when it runs.

import { describe } from "vitest";
import { defineBudgetContract } from "./budget.js";
import { budgetStoreContract } from "./budget-store.js";
import { chainStoreContract } from "./chain.js";
import { concurrencyContract } from "./concurrency.js";
import { conventionsContract } from "./conventions.js";
import { escrowContract } from "./escrow.js";
import { hitlStoreContract } from "./hitl.js";
import { messageStoreContract } from "./messages.js";
import { migrationContract } from "./migrations.js";
import { nonceStoreContract } from "./nonces.js";
import type { SubstrateContractOptions } from "./options.js";
import { outboxStoreContract } from "./outbox.js";
import { paramsStoreContract } from "./params.js";
import { sessionStoreContract } from "./sessions.js";
import { snapshotStampsContract } from "./stamps.js";
import { transactionContract } from "./transactions.js";
import { valuesContract } from "./values.js";
import { writeBatchContract } from "./write-batch.js";

/**
 * Registers `describe("substrate contract: <name>")` with every section of the suite. Call it at the top
 * level of a test file. Nothing is skipped by capability: durable and multi-process stores only get more
 * time per race and per test (see `raceWindow`), and a non-durable store whose data dies with its last
 * handle skips only the reopen check.
 */
export function defineSubstrateContract(opts: SubstrateContractOptions): void {
  describe(`substrate contract: ${opts.name}`, () => {
    migrationContract(opts);
    sessionStoreContract(opts);
    snapshotStampsContract(opts);
    nonceStoreContract(opts);
    budgetStoreContract(opts);
    hitlStoreContract(opts);
    chainStoreContract(opts);
    paramsStoreContract(opts);
    outboxStoreContract(opts);
    messageStoreContract(opts);
    writeBatchContract(opts);
    valuesContract(opts);
    transactionContract(opts);
    concurrencyContract(opts);
    conventionsContract(opts);
    escrowContract(opts);
    // Budget-guard's section stays last and in its own module: another package owns its contents.
    defineBudgetContract(opts);
  });
}
