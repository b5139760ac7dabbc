// Runs the shared substrate contract against the memory substrate, one shared key per test location.
// Memory-only behaviour (private handles, nested and leaked transactions) is tested in memory.test.ts.

import { defineSubstrateContract } from "@leash/substrate-contract";
import { createMemorySubstrate, deleteSharedMemory } from "./index.js";

let locations = 0;

defineSubstrateContract({
  name: "memory",
  open: async (location) => createMemorySubstrate({ shared: location }),
  freshLocation: async () => `memory-contract-${process.pid}-${++locations}`,
  dispose: async (location) => {
    deleteSharedMemory(location);
  },
});
