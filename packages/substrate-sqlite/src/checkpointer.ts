// Moves WAL checkpoints off the event loop: a worker thread with its own connection copies committed
// WAL frames into the database file. It never writes rows, and it never decides when the writer may run.
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

/** Counters for tests and benchmarks. */
export interface CheckpointStats {
  /** PASSIVE checkpoints that copied frames (they never block the writer; idle ones go uncounted). */
  passive: number;
  /** RESTART checkpoints run while the writer paused, after which the next commit starts the WAL anew. */
  restarts: number;
}

export interface CheckpointerOptions {
  /** Database file, already in WAL mode. */
  path: string;
  /** The writer's `synchronous`: under FULL or NORMAL a checkpoint fsyncs the WAL before copying and the file after. */
  synchronous: string;
  /** macOS: F_FULLFSYNC for the checkpoint's syncs, as the writer uses for its own (a no-op elsewhere). */
  fullfsync: boolean;
  /** WAL frames past which the writer is asked to pause for a RESTART: the WAL's size bound. */
  restartFrames: number;
  /** How often the worker copies what the WAL holds, in milliseconds. */
  intervalMs: number;
}

type FromWorker =
  | { type: "passive" }
  | { type: "restart_wanted" }
  | { type: "restarted"; busy: boolean }
  | { type: "closed" }
  | { type: "error"; message: string };

/*
 * The worker, plain JavaScript run with `eval` (no file of its own beside the compiled module, and the
 * same when tests run the TypeScript source). A PASSIVE checkpoint copies frames while the writer goes
 * on; but as long as frames keep arriving the WAL never drains, so it never starts over and would grow
 * without end. Past `restartFrames` the worker repeats PASSIVE until little is left uncopied, then asks
 * the writer to pause between two batches and runs RESTART, which has only that little left to copy.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const Database = require(workerData.driver);
const CATCH_UP_FRAMES = 256;
let db = null;
let timer = null;
let asked = false;
// Frames past which a RESTART is asked for; raised after one found another process writing.
let askAt = workerData.restartFrames;
// Told only when a checkpoint moved: an idle process's event loop is not woken ten times a second.
let lastCheckpointed = -1;
function fail(error) {
  clearInterval(timer);
  try { if (db) db.close(); } catch {}
  db = null;
  parentPort.postMessage({ type: "error", message: error instanceof Error ? error.message : String(error) });
}
function passive() {
  const [row] = db.pragma("wal_checkpoint(PASSIVE)");
  if (row.checkpointed !== lastCheckpointed) {
    lastCheckpointed = row.checkpointed;
    parentPort.postMessage({ type: "passive" });
  }
  return row;
}
function tick() {
  if (asked || db === null) return;
  try {
    let row = passive();
    if (row.log < askAt) return;
    for (let i = 0; i < 3 && row.log - row.checkpointed > CATCH_UP_FRAMES; i++) row = passive();
    asked = true;
    parentPort.postMessage({ type: "restart_wanted" });
  } catch (error) {
    fail(error);
  }
}
try {
  db = new Database(workerData.path, { timeout: 0 });
  db.pragma("synchronous = " + workerData.synchronous);
  db.pragma("fullfsync = " + (workerData.fullfsync ? "ON" : "OFF"));
  timer = setInterval(tick, workerData.intervalMs);
} catch (error) {
  fail(error);
}
parentPort.on("message", (message) => {
  if (message === "restart") {
    if (db === null) return;
    try {
      // This process's writer is paused; another process may hold the lock a moment longer.
      db.pragma("busy_timeout = 10");
      const [row] = db.pragma("wal_checkpoint(RESTART)");
      db.pragma("busy_timeout = 0");
      asked = false;
      askAt = row.busy !== 0 ? row.log + workerData.restartFrames : workerData.restartFrames;
      parentPort.postMessage({ type: "restarted", busy: row.busy !== 0 });
    } catch (error) {
      fail(error);
    }
  } else if (message === "close") {
    clearInterval(timer);
    try { if (db) db.close(); } catch {}
    db = null;
    parentPort.postMessage({ type: "closed" });
  }
});
`;

/**
 * One per writing connection, which must run with `wal_autocheckpoint = 0`. The writer calls
 * `pauseIfWanted()` between batches (holding no lock) and `close()` before closing its own
 * connection, so that its close, as the last connection's, checkpoints and removes the WAL.
 */
export class WalCheckpointer {
  readonly stats: CheckpointStats = { passive: 0, restarts: 0 };
  readonly #worker: Worker;
  #restartWanted = false;
  #failed = false;
  #exited = false;
  #onRestarted: (() => void) | null = null;
  #onClosed: (() => void) | null = null;

  /** `onFailure` is told once, should the worker fail; the writer then checkpoints by itself again. */
  constructor(
    options: CheckpointerOptions,
    private readonly onFailure: (message: string) => void,
  ) {
    this.#worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { ...options, driver: createRequire(import.meta.url).resolve("better-sqlite3") },
    });
    // A helper in the background: it must never keep the process alive by itself.
    this.#worker.unref();
    this.#worker.on("message", (message: FromWorker) => this.#receive(message));
    this.#worker.on("error", (error) => this.#fail(error.message));
    this.#worker.on("exit", () => {
      this.#exited = true;
      this.#wake();
    });
  }

  /**
   * Resolves at once unless the WAL has outgrown its bound; then, while the caller holds no lock
   * and starts nothing, the worker runs RESTART, so that the next commit writes the WAL from its start.
   */
  async pauseIfWanted(): Promise<void> {
    if (!this.#restartWanted || this.#failed || this.#exited) return;
    this.#restartWanted = false;
    await new Promise<void>((resolve) => {
      this.#onRestarted = resolve;
      this.#worker.postMessage("restart");
    });
  }

  /** Closes the worker's connection, then stops the worker. */
  async close(): Promise<void> {
    if (!this.#exited) {
      await new Promise<void>((resolve) => {
        this.#onClosed = resolve;
        this.#worker.postMessage("close");
      });
    }
    await this.#worker.terminate();
  }

  #receive(message: FromWorker): void {
    switch (message.type) {
      case "passive":
        this.stats.passive++;
        return;
      case "restart_wanted":
        this.#restartWanted = true;
        return;
      case "restarted": {
        if (!message.busy) this.stats.restarts++;
        const resume = this.#onRestarted;
        this.#onRestarted = null;
        resume?.();
        return;
      }
      case "closed": {
        const closed = this.#onClosed;
        this.#onClosed = null;
        closed?.();
        return;
      }
      case "error":
        this.#fail(message.message);
        return;
    }
  }

  #fail(message: string): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#wake();
    this.onFailure(message);
  }

  /** Nobody may wait on a worker that will not answer. */
  #wake(): void {
    const waiting = [this.#onRestarted, this.#onClosed];
    this.#onRestarted = null;
    this.#onClosed = null;
    for (const wake of waiting) wake?.();
  }
}
