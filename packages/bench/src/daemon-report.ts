// `bench daemon`'s JSON line: the run's figures (daemon, receipts checked, engine, one client, one daemon)
// with the overspend and end checks beside them. No measuring: bench-daemon.ts measures.
import type { Figure, Meter } from "./daemon-meter.js";
import type { EndChecks } from "./end-checks.js";
import type { PgProbe } from "./pg-probe.js";
import { scaleFigures } from "./scale-report.js";

type MeterFigure = ReturnType<Meter["figure"]>;

/** The figures of one run: each party's, measured in alternating slices. */
export interface RunFigures {
  readonly mainMeter: Meter;
  readonly checkedMeter: Meter;
  readonly main: MeterFigure;
  readonly checked: MeterFigure;
  readonly engine: MeterFigure;
  readonly one: MeterFigure;
  readonly engineOne: MeterFigure;
  readonly oneDaemon: MeterFigure | null;
}

/** The overspend check of several daemons on one store: the ALLOWs of a $1 budget in $0.01 holds. */
export interface OverspendFigures {
  readonly budget_usd: string;
  readonly estimate_usd: string;
  readonly allowed: number;
  readonly max_allowed: number;
  readonly zero_overspend: boolean;
}

/** The run's JSON line. */
export function daemonReport(
  run: { transport: string; store: string; daemons: number; clients: number; seconds: number },
  figures: RunFigures,
  after: {
    overspend: OverspendFigures | null;
    checks: EndChecks | null;
    probe: PgProbe | null;
  },
): Record<string, unknown> {
  const { main, checked, engine, one, engineOne, oneDaemon, mainMeter, checkedMeter } = figures;
  const figure = (f: Figure) => ({
    decisions_per_sec: f.decisions_per_sec,
    p50_ms: f.p50_ms,
    p99_ms: f.p99_ms,
    max_ms: f.max_ms,
  });
  return {
    bench: "daemon",
    transport: run.transport,
    store: run.store,
    daemons: run.daemons,
    // The daemons are `leash serve` child processes; the clients and the library engine run in this one.
    daemon_process: "child",
    clients: run.clients,
    seconds: run.seconds,
    decisions: main.decisions,
    ...figure(main),
    // Steadier than decisions/s on a shared machine; the engine figure's own is engine.cpu_us_per_decision.
    client_cpu_us_per_decision: main.cpu_us_per_decision,
    daemon_cpu_us_per_decision: main.daemon_cpu_us_per_decision,
    fail_closed: mainMeter.failed + checkedMeter.failed,
    receipts_checked: figure(checked),
    engine: {
      decisions_per_sec: engine.decisions_per_sec,
      p50_ms: engine.p50_ms,
      p99_ms: engine.p99_ms,
      cpu_us_per_decision: engine.cpu_us_per_decision,
    },
    ratio_daemon_engine: Number((main.decisions_per_sec / engine.decisions_per_sec).toFixed(3)),
    one_client: {
      daemon_p50_ms: one.p50_ms,
      engine_p50_ms: engineOne.p50_ms,
      transport_overhead_p50_ms: Number((one.p50_ms - engineOne.p50_ms).toFixed(3)),
    },
    one_daemon: oneDaemon === null ? null : figure(oneDaemon),
    overspend_check: after.overspend,
    scale: scaleFigures(mainMeter, after.probe?.figures() ?? null),
    end_checks: after.checks,
    node: process.version,
  };
}
