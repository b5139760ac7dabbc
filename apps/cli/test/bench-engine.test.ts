// Tests for `leash bench engine`: one JSON line with a positive rate on SQLite (one and two processes), fresh stores.
// Runs are half a second; figures are checked for sanity only. --processes runs the built dist/bin.js as workers.
import { existsSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { bucketOf, bucketRange, childNodeFlags, LatencyHistogram } from "@leash/bench";
import { afterAll, describe, expect, it } from "vitest";
import { CLI_BIN, expectOneLineError, leash, scratchDir, testKey } from "./helpers.js";
import { PG_URL, withPg } from "./stores.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());
const KEY = testKey(scratch.dir);

const REPORT_KEYS = [
  "bench",
  "store",
  "processes",
  "concurrency",
  "seconds",
  "decisions",
  "decisions_per_sec",
  "p50_ms",
  "p99_ms",
  "max_ms",
  "cpu_us_per_decision",
  "machine_reference",
  "allow_ratio",
  "store_stats",
  "signer",
  "node",
];

function report(stdout: string) {
  const lines = stdout.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  const r = JSON.parse(lines[0]!);
  expect(Object.keys(r)).toEqual(REPORT_KEYS);
  expect(r.decisions_per_sec).toBeGreaterThan(0);
  expect(r.allow_ratio).toBeGreaterThanOrEqual(0.99);
  expect(r.p50_ms).toBeGreaterThan(0);
  expect(r.p50_ms).toBeLessThanOrEqual(r.p99_ms);
  expect(r.p99_ms).toBeLessThanOrEqual(r.max_ms);
  expect(r.node).toBe(process.version);
  expect(["libsodium", "node:crypto"]).toContain(r.signer);
  // CPU per decision is real work (an Ed25519 signature alone is tens of µs) and no more than all
  // the machine's cores could have spent in the measured seconds.
  expect(r.cpu_us_per_decision).toBeGreaterThan(10);
  expect((r.cpu_us_per_decision * r.decisions) / 1e6).toBeLessThanOrEqual(
    r.seconds * availableParallelism() * 1.05,
  );
  if (r.machine_reference !== null) {
    const { workload, before_per_sec, after_per_sec } = r.machine_reference;
    expect(workload).toMatch(/Ed25519/);
    expect(before_per_sec).toBeGreaterThan(0);
    expect(after_per_sec).toBeGreaterThan(0);
  }
  return r;
}

describe("leash bench engine", () => {
  it("measures the ALLOW path on a fresh SQLite file", async () => {
    const path = join(scratch.dir, "bench.db");
    // --fresh must remove what is there, even something that is not a database.
    writeFileSync(path, "not a database ".repeat(100));
    writeFileSync(`${path}-wal`, "stale");
    const argv = [
      "bench",
      "engine",
      "--store",
      `sqlite:${path}`,
      "--fresh",
      "--seconds",
      "0.5",
      "--concurrency",
      "4",
      "--key-file",
      KEY.file,
      "--reference",
      "0.1",
    ];
    const r = await leash([...argv, "--warmup", "0.1"]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const out = report(r.stdout);
    expect(out).toMatchObject({ bench: "engine", store: "sqlite", processes: 1, concurrency: 4 });
    expect(out.seconds).toBeGreaterThanOrEqual(0.5);
    expect(out.decisions).toBeGreaterThan(0);
    expect(out.machine_reference).not.toBeNull();
    // The engine judges the calls that wait together in one transaction (a batch); at most one each.
    expect(out.store_stats.committed).toBeGreaterThan(0);
    expect(out.store_stats.committed).toBeLessThanOrEqual(out.decisions);
    expect(out.store_stats.commits).toBeGreaterThan(0);
    expect(out.store_stats.commits).toBeLessThanOrEqual(out.store_stats.committed);
    expect(out.store_stats.largestBatch).toBeGreaterThanOrEqual(1);
  }, 30_000);

  it("merges a second process on the same SQLite file, both signing with the one ephemeral key", async () => {
    expect(existsSync(CLI_BIN), "run `npx tsc --build` first: workers run dist/bin.js").toBe(true);
    const path = join(scratch.dir, "bench2.db");
    const r = await leash([
      "bench",
      "engine",
      "--store",
      `sqlite:${path}`,
      "--fresh",
      "--seconds",
      "0.5",
      "--warmup",
      "0.1",
      "--concurrency",
      "4",
      "--processes",
      "2",
      "--ephemeral-key",
    ]);
    // The warning is the only stderr line, and it names the key's public half.
    expect(r.stderr).toMatch(/^leash: warning: --ephemeral-key: .* ([0-9a-f]{64})\n$/);
    expect(r.code).toBe(0);
    const out = report(r.stdout);
    expect(out).toMatchObject({ store: "sqlite", processes: 2, concurrency: 4 });
    // Summed over both processes: a transaction per batch.
    expect(out.store_stats.committed).toBeGreaterThan(0);
    expect(out.store_stats.committed).toBeLessThanOrEqual(out.decisions);
    // The worker got the same key: the whole chain verifies with that one public key.
    const publicKey = /([0-9a-f]{64})\n$/.exec(r.stderr)![1]!;
    const verified = await leash(["verify", "--store", `sqlite:${path}`, "--pubkey", publicKey]);
    expect(verified.stdout).toMatch(/^OK: \d+ entries verified/);
    expect(verified.code).toBe(0);
  }, 60_000);

  it("drops the fresh postgres schema afterwards", async () => {
    const count = () =>
      withPg(async (c) => {
        const { rows } = await c.query(
          "SELECT count(*)::int AS n FROM pg_namespace WHERE nspname LIKE 'leash_bench_%'",
        );
        return rows[0].n as number;
      });
    const before = await count();
    const r = await leash(
      [
        "bench",
        "engine",
        "--store",
        PG_URL,
        "--fresh",
        "--seconds",
        "0.3",
        "--warmup",
        "0",
        "--concurrency",
        "2",
      ],
      "",
      { LEASH_SIGNING_KEY: KEY.pem },
    );
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const out = report(r.stdout);
    expect(out.store).toBe("postgres");
    expect(out.store_stats.committed).toBeGreaterThan(0);
    expect(out.store_stats.committed).toBeLessThanOrEqual(out.decisions);
    expect(Object.keys(out.store_stats)).toEqual(
      expect.arrayContaining(["commits", "largestBatch", "multiRowWrites"]),
    );
    expect(await count()).toBe(before);
  }, 30_000);

  it("keeps group_commit=off through --fresh, across two processes", async () => {
    const r = await leash(
      [
        "bench",
        "engine",
        "--store",
        `${PG_URL}${PG_URL.includes("?") ? "&" : "?"}group_commit=off`,
        "--fresh",
        "--processes",
        "2",
        "--seconds",
        "0.3",
        "--warmup",
        "0",
        "--concurrency",
        "2",
      ],
      "",
      { LEASH_SIGNING_KEY: KEY.pem },
    );
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(report(r.stdout)).toMatchObject({ store: "postgres", processes: 2, allow_ratio: 1 });
  }, 60_000);

  it("runs on memory: in one process and refuses to share it between processes", async () => {
    const one = await leash([
      "bench",
      "engine",
      "--store",
      "memory:",
      "--seconds",
      "0.2",
      "--warmup",
      "0",
      "--reference",
      "0",
      "--key-file",
      KEY.file,
    ]);
    expect(one.code).toBe(0);
    // --reference 0 skips the machine reference: the field is null, not missing.
    expect(report(one.stdout)).toMatchObject({ store: "memory", machine_reference: null });
    const two = await leash([
      "bench",
      "engine",
      "--store",
      "memory:",
      "--processes",
      "2",
      "--seconds",
      "0.2",
      "--key-file",
      KEY.file,
    ]);
    expect(two.code).toBe(2);
    expectOneLineError(two.stderr);
    expect(two.stderr).toContain("--processes needs sqlite: or postgres://");
  });
});

describe("child processes of bench engine", () => {
  it("inherit the profiler and heap flags, not the debugger, a profile's file name or a loader", () => {
    expect(
      childNodeFlags([
        "--cpu-prof",
        "--cpu-prof-dir=/tmp/p",
        "--cpu-prof-name=one.cpuprofile",
        "--heap-prof",
        "--inspect=9229",
        "--inspect-brk",
        "--import",
        "tsx",
        "--conditions=development",
        "--max-old-space-size=512",
        "--prof",
      ]),
    ).toEqual(["--cpu-prof", "--cpu-prof-dir=/tmp/p", "--heap-prof", "--max-old-space-size=512", "--prof"]);
  });
});

describe("latency histogram", () => {
  it("buckets every value into a range that holds it, within 1.6 %", () => {
    for (const v of [
      0,
      1,
      63,
      64,
      127,
      128,
      129,
      255,
      256,
      1000,
      65_535,
      65_536,
      1e6,
      123_456_789,
      2 ** 40 - 1,
    ]) {
      const [low, high] = bucketRange(bucketOf(v));
      expect(low).toBeLessThanOrEqual(v);
      expect(high).toBeGreaterThanOrEqual(v);
      expect(high - low).toBeLessThanOrEqual(Math.max(0, v / 64));
    }
    // Buckets tile the line: the next bucket starts right after this one ends.
    for (let b = 0; b < 2000; b++) expect(bucketRange(b + 1)[0]).toBe(bucketRange(b)[1] + 1);
  });

  it("merges through JSON and finds quantiles", () => {
    const a = new LatencyHistogram();
    const b = new LatencyHistogram();
    for (let i = 1; i <= 1000; i++) (i % 2 ? a : b).record(i * 1000);
    const merged = new LatencyHistogram();
    merged.merge(JSON.parse(JSON.stringify(a)));
    merged.merge(JSON.parse(JSON.stringify(b)));
    expect(merged.count).toBe(1000);
    expect(merged.maxNs).toBe(1_000_000);
    expect(merged.quantileNs(0.5) / 500_000).toBeCloseTo(1, 1);
    expect(merged.quantileNs(0.99) / 990_000).toBeCloseTo(1, 1);
    expect(merged.quantileNs(1)).toBeLessThanOrEqual(1_000_000);
    expect(new LatencyHistogram().quantileNs(0.5)).toBe(0);
  });
});
