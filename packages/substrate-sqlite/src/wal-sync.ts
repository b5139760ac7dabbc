// Makes committed WAL frames durable off the event loop: one fdatasync of the -wal file, run in libuv's
// thread pool, covers every commit written before it started. It never writes, checkpoints or retries.
import { closeSync, fdatasync, fsyncSync, openSync } from "node:fs";
import { dirname } from "node:path";
import { SubstrateError } from "@leash/core";

interface Waiter {
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * With `synchronous=NORMAL` SQLite writes a WAL commit without fsyncing it; this class supplies the
 * fsync that `synchronous=FULL` would have done inside COMMIT, but on another thread, so the next
 * batch runs while the previous one is being made durable. Syncs never overlap: commits that arrive
 * while one is in flight wait for the next, which then covers all of them at once.
 */
export class WalSyncer {
  readonly #walPath: string;
  #fd: number | null = null;
  #inFlight = false;
  /** Commits written but not yet covered by a sync that started after them. */
  #waiting: Waiter[] = [];
  /** After a failed fsync the kernel may have dropped the dirty pages: no later sync can be trusted. */
  #failure: SubstrateError | null = null;
  readonly #idle: Array<() => void> = [];
  /** fdatasync calls issued so far: below the number of durable() calls whenever commits shared one. */
  syncs = 0;

  constructor(databasePath: string) {
    this.#walPath = `${databasePath}-wal`;
  }

  /** Resolves once everything written to the WAL before this call is on stable storage. */
  durable(): Promise<void> {
    if (this.#failure !== null) return Promise.reject(this.#failure);
    return new Promise<void>((resolve, reject) => {
      this.#waiting.push({ resolve, reject });
      this.#pump();
    });
  }

  /** Waits for the syncs still owed, then closes the file; call before closing the connection. */
  async close(): Promise<void> {
    if (this.#inFlight || this.#waiting.length > 0) {
      await new Promise<void>((resolve) => this.#idle.push(resolve));
    }
    if (this.#fd !== null) {
      closeSync(this.#fd);
      this.#fd = null;
    }
  }

  #pump(): void {
    if (this.#inFlight) return;
    if (this.#waiting.length === 0) {
      for (const wake of this.#idle.splice(0)) wake();
      return;
    }
    const covered = this.#waiting;
    this.#waiting = [];
    let fd: number;
    try {
      fd = this.#open();
    } catch (error) {
      this.#fail(covered, error);
      return;
    }
    this.#inFlight = true;
    this.syncs++;
    fdatasync(fd, (error) => {
      this.#inFlight = false;
      if (error) this.#fail(covered, error);
      else for (const waiter of covered) waiter.resolve();
      this.#pump();
    });
  }

  #fail(covered: Waiter[], error: unknown): void {
    const detail = error instanceof Error ? error.message : String(error);
    this.#failure ??= new SubstrateError(
      "io",
      `could not make ${this.#walPath} durable (fdatasync: ${detail}); the last commits may be lost on power failure — reopen the store`,
      { cause: error },
    );
    for (const waiter of [...covered, ...this.#waiting.splice(0)]) waiter.reject(this.#failure);
    for (const wake of this.#idle.splice(0)) wake();
  }

  #open(): number {
    if (this.#fd !== null) return this.#fd;
    // SQLite keeps the -wal file while any connection is open (ours is), so this descriptor stays
    // the live log. Its directory entry is made durable once: NORMAL would only do so at a checkpoint.
    const fd = openSync(this.#walPath, "r");
    try {
      const dir = openSync(dirname(this.#walPath), "r");
      try {
        fsyncSync(dir);
      } finally {
        closeSync(dir);
      }
    } catch (error) {
      closeSync(fd);
      throw error;
    }
    this.#fd = fd;
    return fd;
  }
}
