// The entry line format: every column, the body's bytes intact, integers above 2^53 exact, a strict parser.
// Sinks that write the format are tested in sinks/; this is the format alone.

import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { makeEntry } from "../test/support.js";
import { RelayError } from "./errors.js";
import { entryJson, entryLine, parseEntryLine } from "./ndjson.js";

describe("entry lines", () => {
  it("round-trips every column, with the body as the same string and the same UTF-8 bytes", () => {
    const entry = makeEntry(7, "ab".repeat(32), "sëss", 1_000_000_000_000_123);
    const line = entryLine(entry);
    expect(line.endsWith("\n")).toBe(true);
    expect(line.indexOf("\n")).toBe(line.length - 1);
    const back = parseEntryLine(line);
    expect(back).toEqual(entry);
    // The hash over the delivered body equals the one signed at the source.
    expect(createHash("sha256").update(back.body, "utf8").digest("hex")).toBe(entry.entry_hash);
    expect(Object.keys(JSON.parse(line))).toEqual([
      "seq",
      "entry_id",
      "kind",
      "session_id",
      "created_ns",
      "key_id",
      "prev_hash",
      "entry_hash",
      "signature",
      "body",
    ]);
  });

  it("writes integers above 2^53 with their exact digits, and a null session as null", () => {
    const createdNs = 2 ** 60 + 256;
    const text = entryJson({ ...makeEntry(1, "0".repeat(64), null, createdNs) });
    // JSON.stringify would print the shortest round-trip form, 1152921504606847200.
    expect(text).toContain('"created_ns":1152921504606847232,');
    expect(text).toContain('"session_id":null,');
    expect(parseEntryLine(text).created_ns).toBe(createdNs);
  });

  it("refuses what is not an entry line, with code corrupt", () => {
    const good = JSON.parse(entryJson(makeEntry(1, "0".repeat(64), "s", 1))) as Record<string, unknown>;
    const bad = [
      '{"seq":1',
      "[]",
      "null",
      JSON.stringify({ ...good, body: { parsed: true } }),
      JSON.stringify({ ...good, seq: 1.5 }),
      JSON.stringify({ ...good, session_id: 3 }),
    ];
    for (const text of bad) {
      const error = (() => {
        try {
          parseEntryLine(text);
          return null;
        } catch (e) {
          return e;
        }
      })();
      expect(RelayError.isInstance(error) && error.code, text).toBe("corrupt");
    }
  });
});
