// The stdout sink on a real stream: NDJSON lines, recent redeliveries skipped, a failed write retryable.
// process.stdout itself is left alone; a PassThrough (or a destroyed stream) stands where it would be.

import { PassThrough, Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { makeEntry } from "../../test/support.js";
import { entryLine } from "../ndjson.js";
import { createStdoutSink } from "./stdout.js";

const entries = (n: number, from = 0) =>
  Array.from({ length: n }, (_, i) => makeEntry(from + i, "0".repeat(64), "s", 1_000 + i));

describe("stdout sink", () => {
  it("writes NDJSON lines and skips entries it wrote recently", async () => {
    const stream = new PassThrough();
    const chunks: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    const sink = createStdoutSink({ stream, remember: 3 });
    const batch = entries(5);
    await sink.deliver(batch.slice(0, 3));
    const again = await sink.deliver(batch.slice(0, 4));
    expect(again.outcomes.map((o) => o.status)).toEqual(Array(4).fill("delivered"));
    expect(Buffer.concat(chunks).toString("utf8")).toBe(batch.slice(0, 4).map(entryLine).join(""));
    // Only the 3 most recent ids are remembered: entry 0 has been forgotten and is written again.
    await sink.deliver([batch[0]!]);
    expect(Buffer.concat(chunks).toString("utf8").split("\n").filter(Boolean)).toHaveLength(5);
  });

  it("reports a write the stream refuses as retryable", async () => {
    const stream = new Writable({
      write(_chunk, _encoding, callback) {
        callback(new Error("EPIPE: reader went away"));
      },
    });
    stream.on("error", () => undefined);
    const sink = createStdoutSink({ stream });
    const result = await sink.deliver(entries(2));
    expect(result.outcomes).toEqual([
      { status: "retryable", error: expect.stringContaining("EPIPE") },
      { status: "retryable", error: expect.stringContaining("EPIPE") },
    ]);
  });
});
