// @leash/relay: ships chain entries from the outbox to sinks — the relay loop, the Sink port, four sinks.
// The PostgreSQL sink is @leash/relay/postgres (it needs `pg`); leases and claims are @leash/outbox's.

export type { BackoffOptions } from "./backoff.js";
export { backoffDelay } from "./backoff.js";
export { describeError, RelayError, type RelayErrorCode } from "./errors.js";
export { entryJson, entryLine, parseEntryLine } from "./ndjson.js";
export { createRelay, type Relay, type RelayOptions, type RelayStats, type RoundResult } from "./relay.js";
export {
  DELIVERED,
  type DeliveryOutcome,
  type DeliveryResult,
  permanent,
  retryable,
  SINK_SPECIFICATION_VERSION,
  type Sink,
  unsent,
} from "./sink.js";
export { FileSink, type FileSinkOptions, openFileSink } from "./sinks/file.js";
export { createStdoutSink, type StdoutSinkOptions } from "./sinks/stdout.js";
export {
  createWebhookSink,
  SIGNATURE_HEADER,
  signWebhookBody,
  verifyWebhookSignature,
  type WebhookSinkOptions,
} from "./sinks/webhook.js";
