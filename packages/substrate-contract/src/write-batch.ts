// Contract tests for SubstrateTx.writeBatch: one call that writes entries, outbox items, holds, sessions and
// accounts exactly as the single calls would, in the port's order. How a store sends them is not checked.

import { describe } from "vitest";
import type { SubstrateContractOptions } from "./options.js";
import { writeBatchRefusalsContract } from "./write-batch-refusals.js";
import { writeBatchRowsContract } from "./write-batch-rows.js";
import { writeBatchWritesContract } from "./write-batch-writes.js";

/** Registers `describe("writeBatch")`: what a batch writes, what it is refused for, how its rows read back. */
export function writeBatchContract(opts: SubstrateContractOptions): void {
  describe("writeBatch", () => {
    writeBatchWritesContract(opts);
    writeBatchRefusalsContract(opts);
    writeBatchRowsContract(opts);
  });
}
