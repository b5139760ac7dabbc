// The stdout sink: the entries as NDJSON on a stream, for piping into a log shipper (Vector, Fluent Bit).
// A stream remembers nothing across restarts: it skips redeliveries within the process only.

import type { Writable } from "node:stream";
import type { ChainEntryRecord } from "@leash/core";
import { describeError } from "../errors.js";
import { entryLine } from "../ndjson.js";
import { DELIVERED, type DeliveryResult, retryable, SINK_SPECIFICATION_VERSION, type Sink } from "../sink.js";

export interface StdoutSinkOptions {
  /** Where the lines go (default process.stdout). */
  stream?: Writable;
  /**
   * How many recent entry ids to remember for skipping redeliveries (default 100,000). A redelivery
   * comes within a lease or two of the first delivery, so recent ids are the ones that matter.
   */
  remember?: number;
  name?: string;
}

/**
 * Writes each batch as NDJSON lines and reports it delivered once the stream has accepted the bytes.
 * Across restarts the sink cannot know what it wrote: a consumer that needs each entry once dedupes by
 * entry_id (every line has it).
 */
export function createStdoutSink(options: StdoutSinkOptions = {}): Sink {
  const stream: Writable = options.stream ?? process.stdout;
  const capacity = Math.max(0, options.remember ?? 100_000);
  // A Set iterates in insertion order: the first key is the oldest, evicted first.
  const recent = new Set<string>();
  const name = options.name ?? "stdout";

  const write = (text: string) =>
    new Promise<void>((resolve, reject) => {
      // The callback fires once the chunk is handed to the OS (or fails); waiting for it is the
      // back-pressure: the relay does not claim more while the stream is behind.
      stream.write(text, "utf8", (error?: Error | null) => (error ? reject(error) : resolve()));
    });

  return {
    specificationVersion: SINK_SPECIFICATION_VERSION,
    name,
    async deliver(batch: readonly ChainEntryRecord[]): Promise<DeliveryResult> {
      const fresh = new Set<string>();
      let text = "";
      for (const entry of batch) {
        if (recent.has(entry.entry_id) || fresh.has(entry.entry_id)) continue;
        fresh.add(entry.entry_id);
        text += entryLine(entry);
      }
      if (text !== "") {
        try {
          await write(text);
        } catch (error) {
          const reason = `${name}: write failed: ${describeError(error)}`;
          return { outcomes: batch.map((e) => (fresh.has(e.entry_id) ? retryable(reason) : DELIVERED)) };
        }
      }
      for (const id of fresh) {
        recent.add(id);
        if (recent.size > capacity) recent.delete(recent.values().next().value as string);
      }
      return { outcomes: batch.map(() => DELIVERED) };
    },
  };
}
