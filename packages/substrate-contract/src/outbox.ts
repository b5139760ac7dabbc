// Contract tests for the OutboxStore: enqueue, leases (claim, expiry, reclaim), settling by the holder, requeue.
// Delivery itself (sinks, retries, backoff) is @leash/relay's; here only who may hold and settle which item.

import { describe } from "vitest";
import type { SubstrateContractOptions } from "./options.js";
import { outboxLeasesContract } from "./outbox-leases.js";
import { outboxQueueContract } from "./outbox-queue.js";
import { outboxRequeueContract } from "./outbox-requeue.js";

/** Registers `describe("outbox")`: the queue, the leases, the requeue of DEAD items. */
export function outboxStoreContract(opts: SubstrateContractOptions): void {
  describe("outbox", () => {
    outboxQueueContract(opts);
    outboxLeasesContract(opts);
    outboxRequeueContract(opts);
  });
}
