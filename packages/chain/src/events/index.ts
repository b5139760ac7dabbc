// Typed chain events: one TypeScript type and one versioned JSON Schema per entry kind, and the check.
// The entry envelope (hash, link, signature) is ../verify's; docs/chain-format.md documents both.
export {
  chainEventOf,
  checkEntryEvent,
  checkEventData,
  type EventViolation,
  eventVersionOf,
  isChainEventKind,
} from "./check.js";
export {
  type ChainEventKind,
  EVENT_SCHEMAS,
  type EventSchemaVersion,
  type JsonSchema,
  WRITTEN_KINDS,
} from "./schemas.js";
export type * from "./types.js";
