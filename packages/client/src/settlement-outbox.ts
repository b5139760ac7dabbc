// The post-execs the daemon has not yet confirmed durable, kept per (session, call) and sent again
// (after a reconnect, a heartbeat, the next post-exec) until an ack or a definite refusal arrives.
// It decides nothing; a re-send is safe because the daemon records one settlement per call.
import { ErrorCode, type Payload } from "@leash/wire";
import type { SettleOutcome } from "./transport.js";

/** Refusals that say the settlement was not recorded yet and may be sent again. */
const RETRYABLE = new Set<ErrorCode>([ErrorCode.DAEMON_UNAVAILABLE, ErrorCode.RATE_LIMITED]);

/** How many unconfirmed settlements one client keeps; past it the oldest is given up (and reported). */
export const MAX_KEPT_SETTLEMENTS = 10_000;

export interface OutboxOptions {
  send(payload: Payload): Promise<SettleOutcome>;
  /** Told when a kept settlement is refused on a re-send, or given up because too many are kept. */
  onGiveUp(payload: Payload, why: string): void;
}

export class SettlementOutbox {
  readonly #options: OutboxOptions;
  readonly #kept = new Map<string, Payload>();
  #flushing: Promise<void> | null = null;

  constructor(options: OutboxOptions) {
    this.#options = options;
  }

  /** Settlements sent but not yet confirmed durable. */
  get size(): number {
    return this.#kept.size;
  }

  /** Keeps `payload` under `key` (session and call) and sends it; kept until confirmed or refused. */
  async send(key: string, payload: Payload): Promise<SettleOutcome> {
    this.#kept.delete(key);
    this.#kept.set(key, payload);
    if (this.#kept.size > MAX_KEPT_SETTLEMENTS) {
      const [oldestKey, oldest] = this.#kept.entries().next().value as [string, Payload];
      this.#kept.delete(oldestKey);
      this.#options.onGiveUp(oldest, `more than ${MAX_KEPT_SETTLEMENTS} settlements unconfirmed`);
    }
    const outcome = await this.#options.send(payload);
    this.#conclude(key, payload, outcome);
    return outcome;
  }

  /** Sends every kept settlement again, one after another; stops at the first that gets no answer. */
  retry(): Promise<void> {
    if (this.#flushing !== null || this.#kept.size === 0) return this.#flushing ?? Promise.resolve();
    this.#flushing = (async () => {
      for (const [key, payload] of [...this.#kept]) {
        if (this.#kept.get(key) !== payload) continue; // replaced or confirmed meanwhile
        const outcome = await this.#options.send(payload);
        const refusal = this.#conclude(key, payload, outcome);
        if (refusal !== null) this.#options.onGiveUp(payload, refusal);
        if (!outcome.ok) return;
      }
    })().finally(() => {
      this.#flushing = null;
    });
    return this.#flushing;
  }

  /** Forgets the settlement once its answer is final; returns a definite refusal's text, else null. */
  #conclude(key: string, payload: Payload, outcome: SettleOutcome): string | null {
    if (!outcome.ok) return null; // no answer: kept
    const answer = outcome.answer;
    let refusal: string | null = null;
    if (answer?.case === "error") {
      if (RETRYABLE.has(answer.value.code)) return null;
      refusal = `${ErrorCode[answer.value.code] ?? answer.value.code} ${answer.value.detail}: ${answer.value.message}`;
    } else if (answer !== null && answer.case !== "postExecAck") {
      return null; // not an answer to a settlement: kept, the next re-send asks again
    }
    if (this.#kept.get(key) === payload) this.#kept.delete(key);
    return refusal;
  }
}
