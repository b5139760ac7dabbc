// Public surface of @leash/substrate-memory: the in-memory reference substrate and its shared-key registry.
// Nothing here is durable or crosses processes; use @leash/substrate-sqlite or -postgres for that.

export {
  createMemorySubstrate,
  deleteSharedMemory,
  MemorySubstrate,
  type MemorySubstrateOptions,
} from "./memory.js";
