// Tests of parseSqliteUrl: the accepted URL forms, their options, and the refusals.
// Opening the parsed options is covered in sqlite.test.ts.
import { describe, expect, it } from "vitest";
import { parseSqliteUrl } from "./url.js";

describe("parseSqliteUrl", () => {
  it.each([
    ["sqlite:./leash.db", "./leash.db"],
    ["sqlite:leash.db", "leash.db"],
    ["sqlite:../data/leash.db", "../data/leash.db"],
    ["sqlite:/var/lib/leash/leash.db", "/var/lib/leash/leash.db"],
    ["sqlite:///var/lib/leash/leash.db", "/var/lib/leash/leash.db"],
    ["sqlite://localhost/var/lib/leash.db", "/var/lib/leash.db"],
    ["SQLITE:./Leash.db", "./Leash.db"],
    ["sqlite:./my%20store.db", "./my store.db"],
    ["sqlite:./100%25.db", "./100%.db"],
  ])("%s → path %s", (url, path) => {
    expect(parseSqliteUrl(url)).toEqual({ path });
  });

  it("reads busy_timeout, synchronous and group_commit", () => {
    expect(parseSqliteUrl("sqlite:./a.db?busy_timeout=250&synchronous=normal&group_commit=off")).toEqual({
      path: "./a.db",
      busyTimeoutMs: 250,
      synchronous: "NORMAL",
      groupCommit: false,
    });
    expect(parseSqliteUrl("sqlite:./a.db?busy_timeout_ms=0&synchronous=FULL&group_commit=on")).toEqual({
      path: "./a.db",
      busyTimeoutMs: 0,
      synchronous: "FULL",
      groupCommit: {},
    });
  });

  it("reads mmap_size in bytes, 0 turning memory-mapped reads off", () => {
    expect(parseSqliteUrl("sqlite:./a.db?mmap_size=0")).toEqual({ path: "./a.db", mmapSizeBytes: 0 });
    expect(parseSqliteUrl("sqlite:./a.db?mmap_size=1048576")).toEqual({
      path: "./a.db",
      mmapSizeBytes: 1048576,
    });
    expect(() => parseSqliteUrl("sqlite:./a.db?mmap_size=-1")).toThrow(/mmap_size/);
    expect(() => parseSqliteUrl("sqlite:./a.db?mmap_size=lots")).toThrow(/mmap_size/);
  });

  it.each([
    ["postgres://localhost/leash", /sqlite: scheme/],
    ["./leash.db", /sqlite: scheme/],
    ["sqlite:", /path is empty/],
    ["sqlite::memory:", /in-memory/],
    ["sqlite://data/leash.db", /local file, not a host/],
    ["sqlite:./a.db#frag", /fragments/],
    ["sqlite:./100%.db", /percent-encoding/],
    ["sqlite:./a.db?synchronous=OFF", /FULL or NORMAL/],
    ["sqlite:./a.db?busy_timeout=-1", /whole number/],
    ["sqlite:./a.db?busy_timeout=1.5", /whole number/],
    ["sqlite:./a.db?group_commit=maybe", /on or off/],
    ["sqlite:./a.db?journal_mode=DELETE", /unknown parameter "journal_mode"/],
  ])("refuses %s", (url, message) => {
    expect(() => parseSqliteUrl(url)).toThrow(TypeError);
    expect(() => parseSqliteUrl(url)).toThrow(message);
  });
});
