// A PostgreSQL 15 cluster of a test's own (initdb into a temp dir, its own port) that the test may SIGKILL
// and restart like a crashed server. Never the shared server at 5432: only processes it started are killed.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";

const BIN = process.env.LEASH_PG_BIN ?? "/usr/lib/postgresql/15/bin";
const OS_USER = "postgres";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * initdb and postgres refuse to run as root: as root, they run as the postgres OS user (spawn's uid and
 * gid, so the postmaster is this process's own child, with nothing in between to wait or stop with it).
 */
function serverUser(): { uid: number; gid: number } | Record<string, never> {
  if (process.getuid?.() !== 0) return {};
  return {
    uid: Number(execFileSync("id", ["-u", OS_USER], { encoding: "utf8" })),
    gid: Number(execFileSync("id", ["-g", OS_USER], { encoding: "utf8" })),
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address !== null ? address.port : 0));
    });
  });
}

/** The processes whose parent is `pid` (the postmaster's backends and auxiliary processes), from /proc. */
function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      // "pid (comm) state ppid ...": comm may hold spaces, so split after its closing parenthesis.
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === pid) children.push(Number(name));
    } catch {
      // Gone meanwhile.
    }
  }
  return children;
}

const alive = (pid: number) => existsSync(`/proc/${pid}`) && !isZombie(pid);
function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return false;
  }
}

export class ThrowawayCluster {
  readonly url: string;
  #server: ChildProcess | null = null;
  #log = "";

  private constructor(
    readonly dir: string,
    readonly port: number,
  ) {
    this.url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  }

  /** initdb into a fresh temp dir owned by the postgres OS user; fails with a clear message if it cannot. */
  static async create(): Promise<ThrowawayCluster> {
    const initdb = join(BIN, "initdb");
    if (!existsSync(initdb)) {
      throw new Error(
        `server-crash test: ${initdb} is missing; install PostgreSQL 15's server binaries (or set LEASH_PG_BIN)`,
      );
    }
    const root = mkdtempSync(join(tmpdir(), "leash-pgcrash-"));
    const user = serverUser();
    if (user.uid !== undefined) chownSync(root, user.uid, user.gid);
    const cluster = new ThrowawayCluster(join(root, "data"), await freePort());
    const args = [
      "-D",
      cluster.dir,
      "-U",
      "postgres",
      "-A",
      "trust",
      "--encoding=UTF8",
      "--locale=C",
      // initdb's own final sync only; the server runs with fsync on.
      "--no-sync",
    ];
    try {
      execFileSync(initdb, args, { stdio: "pipe", cwd: root, ...user });
    } catch (error) {
      rmSync(root, { recursive: true, force: true });
      const stderr = (error as { stderr?: Buffer }).stderr?.toString() ?? "";
      throw new Error(`server-crash test: initdb failed: ${stderr || String(error)}`);
    }
    return cluster;
  }

  /** Starts the postmaster (fsync on, as in production) and waits until it takes connections. */
  async start(): Promise<void> {
    if (this.#server !== null) throw new Error("the cluster is already running");
    const args = [
      "-D",
      this.dir,
      "-p",
      String(this.port),
      "-k",
      this.dir,
      "-c",
      "listen_addresses=127.0.0.1",
      "-c",
      "fsync=on",
      "-c",
      "synchronous_commit=on",
      "-c",
      "max_connections=60",
    ];
    const server = spawn(join(BIN, "postgres"), args, {
      stdio: ["ignore", "pipe", "pipe"],
      cwd: this.dir,
      ...serverUser(),
    });
    this.#server = server;
    this.#log = "";
    server.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      this.#log += chunk;
    });
    server.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
      this.#log += chunk;
    });
    for (let i = 0; i < 300; i++) {
      if (server.exitCode !== null || server.signalCode !== null) break;
      const client = new pg.Client({ connectionString: this.url });
      try {
        await client.connect();
        await client.query("SELECT 1");
        await client.end();
        return;
      } catch {
        await client.end().catch(() => undefined);
        await sleep(100);
      }
    }
    throw new Error(`the throwaway PostgreSQL did not come up:\n${this.#log.slice(-4000)}`);
  }

  /**
   * SIGKILL the postmaster and every backend at once, like a server losing power in the middle of the
   * load: stopped first so it forks no new backend, then its children, then itself. Waits until all are gone.
   */
  async crash(): Promise<void> {
    const server = this.#server;
    if (server === null) throw new Error("the cluster is not running");
    const postmaster = server.pid!;
    process.kill(postmaster, "SIGSTOP");
    const victims = [...childrenOf(postmaster), postmaster];
    for (const pid of victims) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    await this.#waitGone(server, victims);
  }

  /** A clean (fast) shutdown; the chain must be read after a restart anyway. */
  async stop(): Promise<void> {
    const server = this.#server;
    if (server === null) return;
    const postmaster = server.pid!;
    const victims = [postmaster, ...childrenOf(postmaster)];
    if (server.exitCode === null && server.signalCode === null) process.kill(postmaster, "SIGINT");
    await this.#waitGone(server, victims, 30_000).catch(async () => {
      for (const pid of victims) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {}
      }
      await this.#waitGone(server, victims);
    });
  }

  /** Stops the server if it runs (by its pids only) and deletes the cluster's directory. */
  async destroy(): Promise<void> {
    try {
      await this.stop();
    } finally {
      rmSync(join(this.dir, ".."), { recursive: true, force: true });
    }
  }

  get running(): boolean {
    return this.#server !== null;
  }

  get log(): string {
    return this.#log;
  }

  async #waitGone(server: ChildProcess, pids: readonly number[], timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (pids.some(alive) || (server.exitCode === null && server.signalCode === null)) {
      if (Date.now() > deadline)
        throw new Error(`PostgreSQL processes ${pids.filter(alive).join(", ")} did not end`);
      await sleep(20);
    }
    this.#server = null;
  }
}
