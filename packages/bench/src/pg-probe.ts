// What the daemons' decisions cost PostgreSQL during `bench daemon`'s measured slices: the CPU of the
// backends serving the daemons (by application_name) and the time those backends waited on locks. Read-only.
import { readdirSync, readFileSync } from "node:fs";
import pg from "pg";

/** USER_HZ: 100 on every Linux this runs on (sysconf(_SC_CLK_TCK) is not reachable from Node). */
const CLOCK_TICKS_PER_SECOND = 100;
/** How often the lock sampler looks at pg_stat_activity; each sample stands for the time since the last. */
const SAMPLE_EVERY_MS = 5;

/** A process's user+system CPU so far in µs, and its command name, from /proc (Linux); null when unreadable. */
export function procCpu(pid: number): { us: number; comm: string } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th fields.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { us: ((Number(fields[11]) + Number(fields[12])) * 1e6) / CLOCK_TICKS_PER_SECOND, comm };
  } catch {
    return null;
  }
}

/** Every `postgres` process's CPU so far by pid (the server and all its children, whoever they serve). */
function allPostgresCpuUs(): Map<number, number> {
  const cpu = new Map<number, number>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const c = procCpu(Number(name));
    if (c !== null && c.comm === "postgres") cpu.set(Number(name), c.us);
  }
  return cpu;
}

/** CPU used between two snapshots by the processes alive at the second (one that ended is not counted). */
function delta(before: ReadonlyMap<number, number>, after: ReadonlyMap<number, number>): number {
  let total = 0;
  for (const [pid, us] of after) total += us - (before.get(pid) ?? 0);
  return total;
}

export interface PgFigures {
  /** CPU of the backends whose application_name is the daemons' own, over the measured slices. */
  readonly backends_cpu_us: number;
  /**
   * Every postgres process's CPU over the same slices (WAL writer, checkpointer, other users included);
   * a process that ended within a slice is not counted for it (its last CPU reading is gone with it).
   */
  readonly all_postgres_cpu_us: number;
  /** Backends seen; backends_gone ended between two looks, and their last slice's CPU is not counted. */
  readonly backends_seen: number;
  readonly backends_gone: number;
  /** Summed over backends: time a backend was seen waiting with wait_event_type 'Lock' (heavyweight locks). */
  readonly lock_wait_us: number;
  /** The same for 'LWLock' (PostgreSQL's internal locks: WAL insertion, buffer mappings, …). */
  readonly lwlock_wait_us: number;
  /** Lock and LWLock wait by wait_event ("Lock:transactionid", "LWLock:WALWrite", …), in µs. */
  readonly wait_by_event: Record<string, number>;
  readonly samples: number;
  readonly sample_every_ms: number;
}

/**
 * Brackets measured slices: begin() snapshots the CPU of the daemons' backends and starts sampling
 * pg_stat_activity for lock waits; end() adds the deltas. Its own connection has another
 * application_name, so neither its queries' CPU nor its waits are counted.
 */
export class PgProbe {
  readonly #client: pg.Client;
  readonly #app: string;
  #start = new Map<number, number>();
  #allStart = new Map<number, number>();
  #seen = new Set<number>();
  #sampling: Promise<void> | null = null;
  #stop = false;
  backendsCpuUs = 0;
  allCpuUs = 0;
  gone = 0;
  lockUs = 0;
  lwlockUs = 0;
  samples = 0;
  readonly byEvent: Record<string, number> = {};

  private constructor(client: pg.Client, app: string) {
    this.#client = client;
    this.#app = app;
  }

  static async open(connection: string, app: string): Promise<PgProbe> {
    const client = new pg.Client({ connectionString: connection, application_name: `${app}_probe` });
    await client.connect();
    return new PgProbe(client, app);
  }

  async #backends(): Promise<Map<number, number>> {
    const { rows } = await this.#client.query<{ pid: number }>(
      "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
      [this.#app],
    );
    const cpu = new Map<number, number>();
    for (const { pid } of rows) {
      const c = procCpu(pid);
      if (c !== null) cpu.set(pid, c.us);
      this.#seen.add(pid);
    }
    return cpu;
  }

  async begin(): Promise<void> {
    this.#start = await this.#backends();
    this.#allStart = allPostgresCpuUs();
    this.#stop = false;
    this.#sampling = this.#sample();
  }

  async end(): Promise<void> {
    this.#stop = true;
    await this.#sampling;
    const after = await this.#backends();
    this.allCpuUs += delta(this.#allStart, allPostgresCpuUs());
    this.backendsCpuUs += delta(this.#start, after);
    for (const pid of this.#start.keys()) if (!after.has(pid)) this.gone++;
  }

  async #sample(): Promise<void> {
    let last = process.hrtime.bigint();
    while (!this.#stop) {
      await new Promise((r) => setTimeout(r, SAMPLE_EVERY_MS));
      const { rows } = await this.#client.query<{ type: string; event: string; n: string }>(
        `SELECT wait_event_type AS type, wait_event AS event, count(*) AS n FROM pg_stat_activity
          WHERE application_name = $1 AND wait_event_type IN ('Lock', 'LWLock') GROUP BY 1, 2`,
        [this.#app],
      );
      const now = process.hrtime.bigint();
      const spanUs = Number(now - last) / 1e3;
      last = now;
      this.samples++;
      for (const { type, event, n } of rows) {
        const us = Number(n) * spanUs;
        if (type === "Lock") this.lockUs += us;
        else this.lwlockUs += us;
        const key = `${type}:${event}`;
        this.byEvent[key] = (this.byEvent[key] ?? 0) + us;
      }
    }
  }

  figures(): PgFigures {
    const round = (x: number) => Math.round(x);
    return {
      backends_cpu_us: round(this.backendsCpuUs),
      all_postgres_cpu_us: round(this.allCpuUs),
      backends_seen: this.#seen.size,
      backends_gone: this.gone,
      lock_wait_us: round(this.lockUs),
      lwlock_wait_us: round(this.lwlockUs),
      wait_by_event: Object.fromEntries(Object.entries(this.byEvent).map(([k, v]) => [k, round(v)])),
      samples: this.samples,
      sample_every_ms: SAMPLE_EVERY_MS,
    };
  }

  close(): Promise<void> {
    return this.#client.end();
  }
}
