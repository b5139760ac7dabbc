// The NDJSON file sink on real files: lines and bytes, dedupe across reopen, torn-line repair, refusals.
// Delivery through a relay and a substrate is in relay.test.ts; here the sink alone.

import { appendFileSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { makeEntry, readLines, removeTempDirs, tempDir } from "../../test/support.js";
import { RelayError } from "../errors.js";
import { entryLine, parseEntryLine } from "../ndjson.js";
import { FileSink, openFileSink } from "./file.js";

afterEach(removeTempDirs);

const entries = (n: number, from = 0) =>
  Array.from({ length: n }, (_, i) => makeEntry(from + i, "0".repeat(64), `s${(from + i) % 2}`, 1_000 + i));

describe("file sink", () => {
  it("appends one line per entry, in order, and the bodies come back byte for byte", async () => {
    const path = join(tempDir(), "audit.ndjson");
    const sink = await openFileSink({ path });
    const batch = entries(5);
    const result = await sink.deliver(batch);
    expect(result.outcomes.map((o) => o.status)).toEqual(Array(5).fill("delivered"));
    expect(readFileSync(path, "utf8")).toBe(batch.map(entryLine).join(""));
    const lines = readFileSync(path, "utf8").trimEnd().split("\n").map(parseEntryLine);
    expect(lines.map((e) => Buffer.from(e.body, "utf8"))).toEqual(
      batch.map((e) => Buffer.from(e.body, "utf8")),
    );
    expect(sink.stats).toEqual({ entries: 5, bytes: statSync(path).size, truncatedBytes: 0 });
    await sink.close();
  });

  it("skips entries already in the file, within a batch, across batches and after reopening", async () => {
    const path = join(tempDir(), "audit.ndjson");
    const first = await openFileSink({ path });
    const batch = entries(4);
    await first.deliver([batch[0]!, batch[1]!, batch[1]!]);
    await first.deliver(batch.slice(0, 3));
    await first.close();
    const reopened = await openFileSink({ path });
    expect(reopened.stats.entries).toBe(3);
    const result = await reopened.deliver(batch);
    expect(result.outcomes.every((o) => o.status === "delivered")).toBe(true);
    expect(readLines(path).map((l) => l.seq)).toEqual([0, 1, 2, 3]);
    await reopened.close();
  });

  it("cuts off a torn last line on open, and the entry in it is written whole on redelivery", async () => {
    const path = join(tempDir(), "audit.ndjson");
    const batch = entries(3);
    const whole = batch.slice(0, 2).map(entryLine).join("");
    const torn = entryLine(batch[2]!).slice(0, 40);
    // What a crash in the middle of an append leaves behind.
    writeFileSync(path, whole + torn);
    const sink = await openFileSink({ path });
    expect(sink.stats.truncatedBytes).toBe(Buffer.byteLength(torn));
    expect(readFileSync(path, "utf8")).toBe(whole);
    await sink.deliver(batch);
    expect(readFileSync(path, "utf8")).toBe(batch.map(entryLine).join(""));
    await sink.close();
  });

  it("reads files larger than its read buffer, lines straddling chunk boundaries", async () => {
    const path = join(tempDir(), "big.ndjson");
    const many = entries(6000);
    writeFileSync(path, many.map(entryLine).join(""));
    expect(statSync(path).size).toBeGreaterThan(2 * (1 << 20));
    const sink = await openFileSink({ path });
    expect(sink.stats.entries).toBe(6000);
    await sink.deliver(entries(2, 5999));
    expect(readLines(path)).toHaveLength(6001);
    await sink.close();
  });

  it("refuses a file with a damaged line before the end, rather than dropping it", async () => {
    const path = join(tempDir(), "audit.ndjson");
    writeFileSync(path, `${entryLine(entries(1)[0]!)}garbage\n${entryLine(entries(1, 1)[0]!)}`);
    const error = await openFileSink({ path }).catch((e: unknown) => e);
    expect(RelayError.isInstance(error) && error.code).toBe("corrupt");
    expect((error as Error).message).toContain(`${path}:2`);
  });

  it("reports a write it cannot make as retryable, and delivers once the path works", async () => {
    const dir = tempDir();
    const path = join(dir, "later", "audit.ndjson");
    // The directory does not exist yet: opening fails, and nothing may count as delivered.
    const sink = new FileSink({ path });
    const batch = entries(2);
    const failed = await sink.deliver(batch);
    expect(failed.outcomes.map((o) => o.status)).toEqual(["retryable", "retryable"]);
    expect(failed.outcomes[0]).toMatchObject({ error: expect.stringContaining("ENOENT") });
    mkdirSync(join(dir, "later"));
    const ok = await sink.deliver(batch);
    expect(ok.outcomes.map((o) => o.status)).toEqual(["delivered", "delivered"]);
    expect(readLines(path).map((l) => l.entry_id)).toEqual(batch.map((e) => e.entry_id));
    await sink.close();
  });

  it("serializes concurrent deliveries so lines never interleave", async () => {
    const path = join(tempDir(), "audit.ndjson");
    const sink = await openFileSink({ path, fsync: false });
    await Promise.all(Array.from({ length: 20 }, (_, i) => sink.deliver(entries(10, i * 10))));
    const lines = readLines(path);
    expect(lines).toHaveLength(200);
    expect(new Set(lines.map((l) => l.entry_id)).size).toBe(200);
    await sink.close();
  });

  it("appends after lines another writer left, and a closed sink delivers nothing", async () => {
    const path = join(tempDir(), "audit.ndjson");
    appendFileSync(path, entryLine(entries(1)[0]!));
    const sink = await openFileSink({ path });
    await sink.close();
    const result = await sink.deliver(entries(1, 1));
    expect(result.outcomes[0]!.status).toBe("retryable");
    expect(readLines(path)).toHaveLength(1);
  });
});
