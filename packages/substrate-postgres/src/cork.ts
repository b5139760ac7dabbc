// Socket corking for a pipelined pg connection: statements sent in one burst leave in one write.
// It knows nothing of transactions; tx.ts and batch-writes.ts decide when a burst begins and ends.

import type { PoolClient } from "pg";

interface Corkable {
  cork(): void;
  uncork(): void;
}
const corked = new WeakSet<Corkable>();

/**
 * On a pipelined connection, holds back what is written to the socket until the promise callbacks
 * queued now have run (process.nextTick comes after them), so statements sent in one burst (a key
 * lock and its second look, a deferred write and the statement after it, SAVEPOINT and the next
 * transaction's first read) go out in one write: one system call and one server wake-up instead of
 * one per statement. No-op where pg does not expose its socket.
 */
export function corkThisTurn(client: PoolClient): void {
  const stream = (client as { connection?: { stream?: Partial<Corkable> } }).connection?.stream;
  if (typeof stream?.cork !== "function" || typeof stream.uncork !== "function") return;
  const socket = stream as Corkable;
  if (corked.has(socket)) return;
  corked.add(socket);
  socket.cork();
  process.nextTick(() => {
    corked.delete(socket);
    socket.uncork();
  });
}

/**
 * Writes out now what corkThisTurn held back. A batch whose transactions answer from memory can
 * run for milliseconds without the event loop turning, so nextTick would come only at its end.
 */
export function uncorkNow(client: PoolClient): void {
  const stream = (client as { connection?: { stream?: Partial<Corkable> } }).connection?.stream;
  if (stream === undefined || !corked.has(stream as Corkable)) return;
  corked.delete(stream as Corkable);
  (stream as Corkable).uncork();
}
