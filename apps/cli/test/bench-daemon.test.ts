// Tests for `leash bench daemon`: one JSON line with every field, on SQLite over the socket and on PostgreSQL
// over gRPC with two daemons (overspend check); 1-second runs, figures checked for sanity only.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { CLI_BIN, expectOneLineError, leash, scratchDir } from "./helpers.js";
import { PG_URL, withPg } from "./stores.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());

const REPORT_KEYS = [
  "bench",
  "transport",
  "store",
  "daemons",
  "daemon_process",
  "clients",
  "seconds",
  "decisions",
  "decisions_per_sec",
  "p50_ms",
  "p99_ms",
  "max_ms",
  "client_cpu_us_per_decision",
  "daemon_cpu_us_per_decision",
  "fail_closed",
  "receipts_checked",
  "engine",
  "ratio_daemon_engine",
  "one_client",
  "one_daemon",
  "overspend_check",
  "scale",
  "end_checks",
  "node",
];

function report(stdout: string) {
  const lines = stdout.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  const r = JSON.parse(lines[0]!);
  expect(Object.keys(r)).toEqual(REPORT_KEYS);
  expect(r.daemon_process).toBe("child");
  expect(r.decisions_per_sec).toBeGreaterThan(0);
  expect(r.p50_ms).toBeGreaterThan(0);
  expect(r.p50_ms).toBeLessThanOrEqual(r.p99_ms);
  expect(r.p99_ms).toBeLessThanOrEqual(r.max_ms);
  expect(r.fail_closed).toBe(0);
  expect(r.receipts_checked.decisions_per_sec).toBeGreaterThan(0);
  expect(r.engine.decisions_per_sec).toBeGreaterThan(0);
  expect(r.ratio_daemon_engine).toBeCloseTo(r.decisions_per_sec / r.engine.decisions_per_sec, 2);
  expect(r.one_client.daemon_p50_ms).toBeGreaterThan(0);
  expect(r.one_client.engine_p50_ms).toBeGreaterThan(0);
  expect(r.one_client.transport_overhead_p50_ms).toBeCloseTo(
    r.one_client.daemon_p50_ms - r.one_client.engine_p50_ms,
    2,
  );
  expect(r.node).toBe(process.version);
  return r;
}

const SHORT = ["--seconds", "1", "--warmup", "0.2", "--single-seconds", "0.5", "--clients", "2"];

describe("leash bench daemon", () => {
  it("measures the daemon over the Unix socket beside the engine on SQLite", async () => {
    expect(existsSync(CLI_BIN), "run `npx tsc --build` first: the daemon runs dist/bin.js").toBe(true);
    const r = await leash([
      "bench",
      "daemon",
      "--transport",
      "unix",
      "--store",
      `sqlite:${join(scratch.dir, "bench.db")}`,
      ...SHORT,
    ]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const out = report(r.stdout);
    expect(out).toMatchObject({
      bench: "daemon",
      transport: "unix",
      store: "sqlite",
      daemons: 1,
      clients: 2,
    });
    expect(out.one_daemon).toBeNull();
    expect(out.overspend_check).toBeNull();
    // The PostgreSQL parts of the scale figures and the end checks need a PostgreSQL store.
    expect(out.scale.decisions).toBe(out.decisions);
    expect(out.scale.daemon_cpu_us_per_decision).toBeGreaterThan(0);
    expect(out.scale.postgres).toBeNull();
    expect(out.scale.total_cpu_us_per_decision).toBeNull();
    expect(out.end_checks).toBeNull();
  }, 120_000);

  it("two daemons on PostgreSQL over gRPC: one daemon's figure beside, and no overspend", async () => {
    const r = await leash([
      "bench",
      "daemon",
      "--transport",
      "grpc",
      "--store",
      PG_URL,
      "--daemons",
      "2",
      ...SHORT,
    ]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const out = report(r.stdout);
    expect(out).toMatchObject({ transport: "grpc", store: "postgres", daemons: 2 });
    expect(out.one_daemon.decisions_per_sec).toBeGreaterThan(0);
    expect(out.overspend_check).toMatchObject({ budget_usd: "1", max_allowed: 100, zero_overspend: true });
    expect(out.overspend_check.allowed).toBeGreaterThan(0);
    expect(out.overspend_check.allowed).toBeLessThanOrEqual(100);
    // Scale: the total is the daemons' CPU plus their PostgreSQL backends', per decision.
    const s = out.scale;
    expect(s.postgres.backends_seen).toBeGreaterThan(0);
    expect(s.postgres.samples).toBeGreaterThan(0);
    expect(s.total_cpu_us_per_decision).toBeCloseTo(
      s.daemon_cpu_us_per_decision + s.postgres_cpu_us_per_decision,
      0,
    );
    expect(s.lock_wait_us_per_decision).toBeGreaterThanOrEqual(0);
    // Every verdict the clients were told is a decision entry of its session; no account overspent.
    expect(out.end_checks).toMatchObject({
      zero_overspend: true,
      told_missing: 0,
      told_mismatched: 0,
      decided_twice: 0,
      every_told_verdict_in_chain: true,
    });
    expect(out.end_checks.told).toBeGreaterThan(out.decisions);
    // Its fresh schemas (the daemons', the engine's) are dropped; nothing went into public.
    const left = await withPg((c) =>
      c.query(
        "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'leash_bench_daemon_%' OR nspname LIKE 'leash_bench_engine_%'",
      ),
    );
    expect(left.rows).toEqual([]);
  }, 180_000);

  it("refuses bad flags with one line and status 2", async () => {
    const sqlite = `sqlite:${join(scratch.dir, "x.db")}`;
    for (const argv of [
      ["--transport", "tcp", "--store", sqlite],
      ["--daemons", "2", "--store", sqlite],
      ["--daemons", "3", "--store", PG_URL],
      ["--daemons", "1,3", "--store", PG_URL],
      ["--daemons", "1,2", "--store", sqlite],
      ["--store", "memory:"],
    ]) {
      const r = await leash(["bench", "daemon", ...argv]);
      expect(r.code, argv.join(" ")).toBe(2);
      expect(r.stdout).toBe("");
      expectOneLineError(r.stderr);
    }
  });
});
