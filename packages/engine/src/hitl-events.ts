// In-process HITL events (a request opened, answered or expired) for listeners in this process.
// Not a delivery channel: other processes see requests through the store and the relay's hitl_request entries.
import type { HitlEvent } from "./types.js";

export type HitlListener = (event: HitlEvent) => void;

export class HitlEvents {
  readonly #listeners = new Set<HitlListener>();

  on(listener: HitlListener): () => void {
    this.#listeners.add(listener);
    return () => {
      this.#listeners.delete(listener);
    };
  }

  /** Called after the change committed; a listener that throws cannot undo it or stop the others. */
  emit(event: HitlEvent): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener(event);
      } catch {
        // A listener's failure is its own: the change is durable and the other listeners still hear of it.
      }
    }
  }
}
