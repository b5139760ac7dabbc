// Options of the SQLite substrate and their defaults, shared by the opener and the URL parser.
// No behaviour lives here: the substrate reads these values, this module only names and checks them.

export interface GroupCommitOptions {
  /** Most transactions that may share one COMMIT (default 256). */
  maxBatch?: number;
  /**
   * Stop adding queued transactions to an open batch once it has been open this long, in
   * milliseconds (default 2): a bound on the latency a transaction can add to those before it.
   */
  maxBatchMs?: number;
}

export interface SqliteSubstrateOptions {
  /** Database file; created when missing. Never `:memory:` (see `parseSqliteUrl`). */
  path: string;
  /** How long to wait for another process's write lock before failing with "busy" (default 5000). */
  busyTimeoutMs?: number;
  /**
   * `FULL` (default): a resolved transaction survives power loss. `NORMAL`: in WAL mode it survives
   * a process crash but the last commits may be lost on power loss, so `capabilities.durable` is false.
   */
  synchronous?: "FULL" | "NORMAL";
  /** Group commit settings, or `false` to give every transaction its own COMMIT (and fsync). */
  groupCommit?: GroupCommitOptions | false;
  /**
   * Bytes of the file SQLite reads through a memory map instead of read() calls (default 256 MiB;
   * 0 turns it off). Writes still go through the WAL, so durability is unchanged; a read then costs a
   * memory access instead of a system call and a copy, which a decision's few indexed reads repeat
   * on every call. Turn it off on filesystems where mmap is unreliable.
   */
  mmapSizeBytes?: number;
  /**
   * Run WAL checkpoints (copying committed pages from the WAL into the database file, two fsyncs each)
   * on a worker thread with its own connection (default true), instead of inside every COMMIT that
   * takes the WAL past 1,000 pages, where they stall the event loop: every caller waiting on this
   * process would wait out the copy and its fsyncs too. The worker copies every `checkpointIntervalMs` (default 100) without blocking
   * the writer; once the WAL holds `checkpointRestartFrames` frames (default 16,384: 64 MiB of 4 KiB
   * pages, its size bound) the writer pauses a few milliseconds between two batches so the WAL can start over.
   */
  backgroundCheckpoints?: boolean;
  checkpointRestartFrames?: number;
  checkpointIntervalMs?: number;
}

export interface ResolvedOptions {
  path: string;
  busyTimeoutMs: number;
  synchronous: "FULL" | "NORMAL";
  groupCommit: Required<GroupCommitOptions> | false;
  mmapSizeBytes: number;
  /** false: SQLite's own checkpoints, inside COMMIT. */
  backgroundCheckpoints: { restartFrames: number; intervalMs: number } | false;
}

export const DEFAULT_BUSY_TIMEOUT_MS = 5000;
export const DEFAULT_MAX_BATCH = 256;
export const DEFAULT_MAX_BATCH_MS = 2;
export const DEFAULT_MMAP_SIZE_BYTES = 256 * 1024 * 1024;
export const DEFAULT_CHECKPOINT_RESTART_FRAMES = 16_384;
export const DEFAULT_CHECKPOINT_INTERVAL_MS = 100;

function wholeNumber(name: string, value: number, min: number): number {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${name} must be an integer >= ${min}, got ${String(value)}`);
  }
  return value;
}

function nonNegative(name: string, value: number): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new RangeError(`${name} must be a finite number >= 0, got ${String(value)}`);
  }
  return value;
}

export function resolveOptions(options: SqliteSubstrateOptions): ResolvedOptions {
  const { path } = options;
  if (typeof path !== "string" || path === "" || path === ":memory:" || path.startsWith("file::memory:")) {
    // "" would be an anonymous temporary database: neither durable nor shareable.
    throw new TypeError(`path must name a database file, got ${JSON.stringify(path)}`);
  }
  const synchronous = options.synchronous ?? "FULL";
  if (synchronous !== "FULL" && synchronous !== "NORMAL") {
    throw new TypeError(`synchronous must be "FULL" or "NORMAL", got ${JSON.stringify(synchronous)}`);
  }
  const group = options.groupCommit;
  const background = options.backgroundCheckpoints ?? true;
  if (typeof background !== "boolean") {
    throw new TypeError(`backgroundCheckpoints must be true or false, got ${JSON.stringify(background)}`);
  }
  const checkpoints = {
    restartFrames: wholeNumber(
      "checkpointRestartFrames",
      options.checkpointRestartFrames ?? DEFAULT_CHECKPOINT_RESTART_FRAMES,
      1,
    ),
    intervalMs: wholeNumber(
      "checkpointIntervalMs",
      options.checkpointIntervalMs ?? DEFAULT_CHECKPOINT_INTERVAL_MS,
      1,
    ),
  };
  return {
    path,
    busyTimeoutMs: wholeNumber("busyTimeoutMs", options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS, 0),
    synchronous,
    mmapSizeBytes: wholeNumber("mmapSizeBytes", options.mmapSizeBytes ?? DEFAULT_MMAP_SIZE_BYTES, 0),
    backgroundCheckpoints: background ? checkpoints : false,
    groupCommit:
      group === false
        ? false
        : {
            maxBatch: wholeNumber("groupCommit.maxBatch", group?.maxBatch ?? DEFAULT_MAX_BATCH, 1),
            maxBatchMs: nonNegative("groupCommit.maxBatchMs", group?.maxBatchMs ?? DEFAULT_MAX_BATCH_MS),
          },
  };
}
