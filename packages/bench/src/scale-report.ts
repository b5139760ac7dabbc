// `bench daemon`'s scale figures: CPU and lock wait per decision from the main figure's meter and the
// PostgreSQL probe, the --daemons list parser, and the side-by-side table a sweep prints. No measuring.
import { InvalidArgumentError } from "commander";
import type { Meter } from "./daemon-meter.js";
import type { PgFigures } from "./pg-probe.js";

/** `--daemons 2` or `--daemons 1,2,4`: a number for one count, a list for a sweep. */
export function parseDaemonCounts(value: string): number | number[] {
  const parts = value.split(",").map((p) => p.trim());
  if (parts.some((p) => !/^[1-9]\d*$/.test(p)))
    throw new InvalidArgumentError("expected a positive integer or a list such as 1,2,4");
  const counts = parts.map(Number);
  return counts.length === 1 ? counts[0]! : counts;
}

export interface ScaleFigures {
  readonly decisions: number;
  readonly decisions_per_sec: number;
  readonly daemon_cpu_us_per_decision: number | null;
  readonly postgres_cpu_us_per_decision: number | null;
  /** daemon + postgres (the daemons' backends): the figure meant to stay flat as daemons are added. */
  readonly total_cpu_us_per_decision: number | null;
  readonly all_postgres_cpu_us_per_decision: number | null;
  readonly lock_wait_us_per_decision: number | null;
  readonly lwlock_wait_us_per_decision: number | null;
  readonly lock_wait_ms: number | null;
  readonly lwlock_wait_ms: number | null;
  readonly postgres: PgFigures | null;
}

const per = (us: number | null, n: number) => (us === null || n === 0 ? null : Number((us / n).toFixed(1)));

export function scaleFigures(main: Meter, pg: PgFigures | null): ScaleFigures {
  const n = main.decisions;
  const daemon = main.daemonCpuUs;
  return {
    decisions: n,
    decisions_per_sec: main.elapsedNs === 0 ? 0 : Math.round(main.allow / (main.elapsedNs / 1e9)),
    daemon_cpu_us_per_decision: per(daemon, n),
    postgres_cpu_us_per_decision: per(pg?.backends_cpu_us ?? null, n),
    total_cpu_us_per_decision: per(daemon === null || pg === null ? null : daemon + pg.backends_cpu_us, n),
    all_postgres_cpu_us_per_decision: per(pg?.all_postgres_cpu_us ?? null, n),
    lock_wait_us_per_decision: per(pg?.lock_wait_us ?? null, n),
    lwlock_wait_us_per_decision: per(pg?.lwlock_wait_us ?? null, n),
    lock_wait_ms: pg === null ? null : Math.round(pg.lock_wait_us / 1e3),
    lwlock_wait_ms: pg === null ? null : Math.round(pg.lwlock_wait_us / 1e3),
    postgres: pg,
  };
}

const ROWS: ReadonlyArray<[string, (r: Record<string, unknown>) => unknown]> = [
  ["decisions/s", (r) => scale(r)?.decisions_per_sec],
  ["daemon CPU µs/decision", (r) => scale(r)?.daemon_cpu_us_per_decision],
  ["postgres CPU µs/decision", (r) => scale(r)?.postgres_cpu_us_per_decision],
  ["total CPU µs/decision", (r) => scale(r)?.total_cpu_us_per_decision],
  ["all postgres CPU µs/decision", (r) => scale(r)?.all_postgres_cpu_us_per_decision],
  ["lock wait µs/decision", (r) => scale(r)?.lock_wait_us_per_decision],
  ["LWLock wait µs/decision", (r) => scale(r)?.lwlock_wait_us_per_decision],
  ["p99 ms", (r) => r.p99_ms],
  ["zero overspend", (r) => checks(r)?.zero_overspend],
  ["told verdicts in chain", (r) => told(r)],
  ["decided twice", (r) => checks(r)?.decided_twice],
];

const scale = (r: Record<string, unknown>) => r.scale as ScaleFigures | null;
const checks = (r: Record<string, unknown>) =>
  r.end_checks as {
    zero_overspend: boolean;
    told: number;
    told_in_chain: number;
    decided_twice: number;
  } | null;
const told = (r: Record<string, unknown>) => {
  const c = checks(r);
  return c === null ? null : `${c.told_in_chain}/${c.told}`;
};

/** One column per daemon count, one row per figure; the last column says how far N moved from the first. */
export function sweepTable(reports: readonly Record<string, unknown>[]): string {
  const head = ["", ...reports.map((r) => `daemons=${r.daemons}`), "last vs first"];
  const rows = ROWS.map(([name, get]) => {
    const values = reports.map(get);
    const [first, last] = [values[0], values.at(-1)];
    const change =
      typeof first === "number" && typeof last === "number" && first !== 0
        ? `${last >= first ? "+" : ""}${(((last - first) / first) * 100).toFixed(0)} %`
        : "";
    return [name, ...values.map((v) => (v === null || v === undefined ? "-" : String(v))), change];
  });
  const table = [head, ...rows];
  const widths = head.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  return `${table
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join("  ")
        .trimEnd(),
    )
    .join("\n")}\n`;
}
