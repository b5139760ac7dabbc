// Keeps the engine's checkpoint (the last head it trusts) outside the store as the chain grows: at most
// one write in flight, at most one every `intervalMs`, and a last one at close. It verifies nothing.
import type { Checkpoint } from "@leash/chain";
import { LeashError } from "./errors.js";
import type { CheckpointStore } from "./types.js";

/** How often a busy engine replaces its checkpoint (each write is a few fsyncs, off the decision path). */
export const DEFAULT_CHECKPOINT_INTERVAL_MS = 250;

/** EngineOptions.checkpointIntervalMs, checked: a positive number of milliseconds. */
export function checkpointIntervalOf(ms: number | undefined): number {
  const value = ms ?? DEFAULT_CHECKPOINT_INTERVAL_MS;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new LeashError(
      "invalid_argument",
      `checkpointIntervalMs must be a positive number, got ${String(ms)}`,
    );
  }
  return value;
}

export class CheckpointWriter {
  #written: string | null = null;
  /** The engine opened from the checkpoint on disk: the first write waits an interval too. */
  #lastWriteAt = performance.now();
  #timer: NodeJS.Timeout | null = null;
  #inFlight: Promise<void> | null = null;
  #error: unknown = null;

  constructor(
    private readonly store: CheckpointStore,
    private readonly current: () => Checkpoint | null,
    private readonly intervalMs: number,
    private readonly onError: (error: unknown) => void = () => undefined,
  ) {}

  /** The last write's failure, if any: the checkpoint on disk is then older than the chain. */
  get error(): unknown {
    return this.#error;
  }

  /** The chain moved: a write is scheduled unless one already is. */
  poke(): void {
    if (this.#timer !== null || this.#inFlight !== null) return;
    const wait = Math.max(0, this.#lastWriteAt + this.intervalMs - performance.now());
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#inFlight = this.#write().finally(() => {
        this.#inFlight = null;
        // Commits during the write are covered by the next one; after a failure, the next commit retries.
        if (this.#error === null && this.#written !== key(this.current())) this.poke();
      });
    }, wait);
    this.#timer.unref();
  }

  /** Records what the engine trusts now (after a clean shutdown or a key rotation), waiting for it. */
  async flush(): Promise<Checkpoint | null> {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    await this.#inFlight;
    const checkpoint = this.current();
    if (checkpoint !== null && key(checkpoint) !== this.#written) {
      await this.store.write(checkpoint);
      this.#written = key(checkpoint);
    }
    return checkpoint;
  }

  async #write(): Promise<void> {
    const checkpoint = this.current();
    this.#lastWriteAt = performance.now();
    if (checkpoint === null || key(checkpoint) === this.#written) return;
    try {
      await this.store.write(checkpoint);
      this.#written = key(checkpoint);
      this.#error = null;
    } catch (error) {
      this.#error = error;
      this.onError(error);
    }
  }
}

function key(checkpoint: Checkpoint | null): string | null {
  return checkpoint === null ? null : `${checkpoint.count}:${checkpoint.head_hash}`;
}
