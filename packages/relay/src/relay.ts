// The relay: claims outbox batches, delivers them to a sink in chain order per session, settles the outcome.
// It owns retry policy, backoff and ordering; leases and storage are @leash/outbox's and the substrate's.

import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import type { Clock, Substrate } from "@leash/core";
import { type ClaimedBatch, claimBatch, outboxStats, settleBatch, systemClock } from "@leash/outbox";
import { type BackoffOptions, backoffDelay } from "./backoff.js";
import { describeError, RelayError } from "./errors.js";
import { sortOutcomes } from "./outcomes.js";
import type { DeliveryOutcome, Sink } from "./sink.js";

export interface RelayOptions {
  substrate: Substrate;
  sink: Sink;
  /** Lease holder name; unique per running relay (default: host, pid and a random suffix). */
  relayId?: string;
  /** Most entries per round (default 100). */
  batchSize?: number;
  /**
   * Lease length (default 30,000 ms). Make it longer than a round can take — for the webhook sink in
   * "entry" mode, a batch of requests plus one timeout — or another relay may redeliver the batch
   * while this one still works on it (harmless with an idempotent sink, but wasted).
   */
  leaseMs?: number;
  /**
   * Tries an entry may end in a retryable failure before it is made DEAD (default 20; Infinity never
   * gives up). Counted by the outbox's `attempts`, which count only rounds the entry was handed to the
   * sink and tried: rounds it spent blocked behind an earlier entry of its session, deferred, held
   * back or left unsent by a sink that stopped early are given back.
   */
  maxAttempts?: number;
  /**
   * Waits while the sink fails (default 100 ms doubling to 30 s, full jitter): between rounds that got
   * nothing through, and, in the loop, before a failing session is tried again (per session, so the
   * other sessions keep flowing meanwhile).
   */
  backoff?: BackoffOptions;
  /** Wait after a round that found less than a full batch to deliver (default 500 ms). */
  pollMs?: number;
  clock?: Clock;
  /** Uniform in [0, 1), for the backoff jitter (default Math.random). */
  random?: () => number;
  /** Told about a round that threw (store unreachable, corrupt outbox) and about a sink that rejected. */
  onError?: (error: unknown) => void;
}

/** What one round did. */
export interface RoundResult {
  /** Entries leased and handed to the sink this round. */
  claimed: number;
  /** Acknowledged as DELIVERED. */
  delivered: number;
  /**
   * Tried and ended in a retryable failure (the first of each session) and released for a later
   * round; those out of attempts are made DEAD instead, and counted in `dead` too.
   */
  failed: number;
  /** Made DEAD: refused for good, or out of attempts. */
  dead: number;
  /**
   * Released untried: behind an entry of the same session in this batch that did not get through
   * (failed, DEAD or unsent).
   */
  blocked: number;
  /** Released untried, the first of their session: the sink stopped before them (endpoint down). */
  unsent: number;
  /**
   * Leased and given back at once, untried: an older entry of the same session was held by another
   * relay or is DEAD, or (in the loop) the session is backing off (see claimBatch). Whoever holds
   * that one, or the next claim after it is settled or requeued, takes them in order.
   */
  deferred: number;
  /** Delivered, but another relay had taken them over by the ack: it will redeliver (a no-op for the sink). */
  leaseLost: number;
}

export interface RelayStats {
  relayId: string;
  running: boolean;
  rounds: number;
  /** Totals since this relay was created (this process only). */
  delivered: number;
  failed: number;
  dead: number;
  blocked: number;
  unsent: number;
  deferred: number;
  leaseLost: number;
  /** Rounds in a row that got nothing through for a failure, or threw: what the backoff grows with. */
  consecutiveFailures: number;
  lastError: string | null;
  /** The backlog, read from the store (all relays' alike): PENDING count and the oldest one's age. */
  lag: { pending: number; oldestPendingAgeMs: number | null };
}

export interface Relay {
  readonly relayId: string;
  readonly sink: Sink;
  /**
   * One round: claim a batch, deliver it, settle it. Rounds never overlap: a call made while one runs
   * waits for it, so a relay never holds more than one batch (back-pressure).
   */
  runOnce(): Promise<RoundResult>;
  /**
   * Rounds until one finds nothing to deliver, gets nothing through (only failures), or throws (which
   * rejects); no waiting between rounds, and no per-session backoff: a failing session is tried again
   * each round while the others flow. For tests, benchmarks and a final flush before shutdown.
   */
  drain(): Promise<RoundResult & { rounds: number }>;
  /**
   * Starts the polling loop: back to back while there is work, pollMs when idle, backoff while nothing
   * gets through; a failing session waits out its own backoff while the others flow.
   */
  start(): void;
  /** Ends the loop after the round in flight (which is settled, never abandoned). */
  stop(): Promise<void>;
  stats(): Promise<RelayStats>;
}

const DEFAULTS = {
  batchSize: 100,
  leaseMs: 30_000,
  maxAttempts: 20,
  pollMs: 500,
  backoff: { baseMs: 100, maxMs: 30_000 },
} as const;

const EMPTY_ROUND: RoundResult = Object.freeze({
  claimed: 0,
  delivered: 0,
  failed: 0,
  dead: 0,
  blocked: 0,
  unsent: 0,
  deferred: 0,
  leaseLost: 0,
});

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RelayError("invalid_argument", `${name} must be a positive integer, got ${String(value)}`);
  }
  return value;
}

function nonNegative(name: string, value: number, allowZero = true): number {
  if (typeof value !== "number" || Number.isNaN(value) || value < 0 || (!allowZero && value === 0)) {
    throw new RelayError(
      "invalid_argument",
      `${name} must be a ${allowZero ? "non-negative" : "positive"} number`,
    );
  }
  return value;
}

const NS_PER_MS = 1_000_000;

/** A round that tried and got nothing through: the sink (or its endpoint) is down, so wait before the next. */
function stuck(round: RoundResult): boolean {
  return round.failed + round.unsent > 0 && round.delivered === 0 && round.dead === 0;
}

const STATUSES = new Set(["delivered", "retryable", "permanent", "unsent"]);

/** The sink's outcomes, checked: one per entry, each one of the four kinds with an error where due. */
function checkedOutcomes(sink: Sink, result: unknown, expected: number): readonly DeliveryOutcome[] {
  const outcomes = (result as { outcomes?: unknown } | null | undefined)?.outcomes;
  if (!Array.isArray(outcomes) || outcomes.length !== expected) {
    const got = Array.isArray(outcomes) ? outcomes.length : "no";
    throw new RelayError(
      "sink_contract",
      `sink ${sink.name} answered ${got} outcomes for ${expected} entries`,
    );
  }
  for (const outcome of outcomes as DeliveryOutcome[]) {
    const ok =
      typeof outcome === "object" &&
      outcome !== null &&
      STATUSES.has(outcome.status) &&
      (outcome.status === "delivered" || typeof outcome.error === "string");
    if (!ok) throw new RelayError("sink_contract", `sink ${sink.name} answered a malformed outcome`);
  }
  return outcomes as DeliveryOutcome[];
}

class RelayImpl implements Relay {
  readonly relayId: string;
  readonly sink: Sink;
  readonly #substrate: Substrate;
  readonly #batchSize: number;
  readonly #leaseMs: number;
  readonly #maxAttempts: number;
  readonly #backoff: Required<BackoffOptions>;
  readonly #pollMs: number;
  readonly #clock: Clock;
  readonly #random: () => number;
  readonly #onError: ((error: unknown) => void) | undefined;

  #tail: Promise<unknown> = Promise.resolve();
  #running = false;
  #loop: Promise<void> | null = null;
  #wake: (() => void) | null = null;
  readonly #totals = { rounds: 0, ...EMPTY_ROUND };
  #consecutiveFailures = 0;
  #lastError: string | null = null;
  /** Sessions whose last try failed: how often in a row, and until when (ns) the loop holds them back. */
  readonly #sessionBackoff = new Map<string | null, { failures: number; untilNs: number }>();

  constructor(options: RelayOptions) {
    if (options.substrate === undefined || options.sink === undefined) {
      throw new RelayError("invalid_argument", "createRelay needs a substrate and a sink");
    }
    this.#substrate = options.substrate;
    this.sink = options.sink;
    this.relayId = options.relayId ?? `relay:${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
    if (this.relayId.trim() === "") throw new RelayError("invalid_argument", "relayId must not be empty");
    this.#batchSize = positiveInteger("batchSize", options.batchSize ?? DEFAULTS.batchSize);
    this.#leaseMs = nonNegative("leaseMs", options.leaseMs ?? DEFAULTS.leaseMs, false);
    const maxAttempts = options.maxAttempts ?? DEFAULTS.maxAttempts;
    this.#maxAttempts =
      maxAttempts === Number.POSITIVE_INFINITY ? maxAttempts : positiveInteger("maxAttempts", maxAttempts);
    const baseMs = nonNegative("backoff.baseMs", options.backoff?.baseMs ?? DEFAULTS.backoff.baseMs, false);
    const maxMs = nonNegative(
      "backoff.maxMs",
      options.backoff?.maxMs ?? Math.max(baseMs, DEFAULTS.backoff.maxMs),
    );
    if (maxMs < baseMs) throw new RelayError("invalid_argument", "backoff.maxMs must be >= backoff.baseMs");
    this.#backoff = { baseMs, maxMs };
    this.#pollMs = nonNegative("pollMs", options.pollMs ?? DEFAULTS.pollMs);
    this.#clock = options.clock ?? systemClock;
    this.#random = options.random ?? Math.random;
    this.#onError = options.onError;
  }

  runOnce(): Promise<RoundResult> {
    return this.#queueRound(false);
  }

  #queueRound(holdBack: boolean): Promise<RoundResult> {
    const run = this.#tail.then(() => this.#round(holdBack));
    this.#tail = run.catch(() => undefined);
    return run;
  }

  async #round(holdBack: boolean): Promise<RoundResult> {
    let batch: ClaimedBatch;
    let result: RoundResult;
    try {
      const nowNs = this.#clock.nowNs();
      const backoff = this.#sessionBackoff;
      batch = await claimBatch(this.#substrate, {
        relayId: this.relayId,
        limit: this.#batchSize,
        leaseMs: this.#leaseMs,
        clock: this.#clock,
        ...(holdBack && backoff.size > 0
          ? { skipSession: (id: string | null) => (backoff.get(id)?.untilNs ?? 0) > nowNs }
          : {}),
      });
      result = await this.#deliver(batch);
    } catch (error) {
      this.#totals.rounds++;
      this.#consecutiveFailures++;
      this.#report(error);
      throw error;
    }
    this.#totals.rounds++;
    for (const key of Object.keys(EMPTY_ROUND) as (keyof RoundResult)[]) this.#totals[key] += result[key];
    // A round that found nothing to try (everything held back or deferred) leaves the count as it was.
    if (stuck(result)) this.#consecutiveFailures++;
    else if (result.claimed > 0) this.#consecutiveFailures = 0;
    return result;
  }

  async #deliver(batch: ClaimedBatch): Promise<RoundResult> {
    const deferred = batch.deferred.length;
    if (batch.items.length === 0) return { ...EMPTY_ROUND, deferred };

    let outcomes: readonly DeliveryOutcome[];
    try {
      // claimBatch has already given back whatever would overtake an older entry held elsewhere, so
      // the rest, in seq order, keeps each session's order.
      const answer = await this.sink.deliver(batch.entries);
      outcomes = checkedOutcomes(this.sink, answer, batch.entries.length);
    } catch (error) {
      this.#report(error);
      const reason = `${this.sink.name}: ${describeError(error)}`;
      outcomes = batch.items.map(() => ({ status: "retryable", error: reason }));
    }

    const sorted = sortOutcomes(batch.items, outcomes, this.#maxAttempts);
    if (sorted.firstError !== null) this.#lastError = sorted.firstError;
    const { delivered, retry, release, dead, failed, blocked, unsentCount } = sorted;
    const { acked } = await settleBatch(this.#substrate, this.relayId, { delivered, retry, release, dead });
    const result = {
      claimed: batch.items.length,
      delivered: acked,
      failed,
      dead: dead.length,
      blocked,
      unsent: unsentCount,
      deferred,
      leaseLost: delivered.length - acked,
    };
    this.#noteSessions(sorted.failedSessions, sorted.passedSessions);
    return result;
  }

  /**
   * The loop's per-session backoff: a session's wait grows with its failures in a row and ends once
   * an entry of it gets through (or goes DEAD). Only sessions failing right now are remembered. The
   * wait is the backoff's ceiling, without jitter (the round backoff already scatters relays), so
   * that a failing session's blocked backlog cannot fill the next batches while the others wait.
   */
  #noteSessions(failed: ReadonlySet<string | null>, passed: ReadonlySet<string | null>): void {
    const backoff = this.#sessionBackoff;
    for (const session of passed) if (!failed.has(session)) backoff.delete(session);
    if (failed.size === 0) return;
    const nowNs = this.#clock.nowNs();
    for (const session of failed) {
      const failures = (backoff.get(session)?.failures ?? 0) + 1;
      const delayMs = backoffDelay(failures, this.#backoff, () => 1);
      backoff.set(session, { failures, untilNs: nowNs + delayMs * NS_PER_MS });
    }
  }

  #report(error: unknown): void {
    this.#lastError = describeError(error);
    try {
      this.#onError?.(error);
    } catch {
      // A logger that throws must not take the relay down with it.
    }
  }

  async drain(): Promise<RoundResult & { rounds: number }> {
    const sum = { rounds: 0, ...EMPTY_ROUND };
    for (;;) {
      const round = await this.runOnce();
      sum.rounds++;
      for (const key of Object.keys(EMPTY_ROUND) as (keyof RoundResult)[]) sum[key] += round[key];
      if (round.claimed === 0 || stuck(round)) return sum;
    }
  }

  start(): void {
    if (this.#running) return;
    if (this.#loop !== null)
      throw new RelayError("invalid_argument", "start() called before stop() finished");
    this.#running = true;
    this.#loop = this.#run().finally(() => {
      this.#loop = null;
    });
  }

  async #run(): Promise<void> {
    while (this.#running) {
      let pause: number;
      try {
        const round = await this.#queueRound(true);
        if (stuck(round)) pause = this.#backoffMs();
        // A full batch, something got through: more is likely queued, so go again at once (a failing
        // session is held back by its own backoff meanwhile).
        else if (round.claimed === this.#batchSize) pause = 0;
        else pause = this.#pollMs;
      } catch {
        // Already reported by the round; a store that is down is waited out like a failing sink.
        pause = this.#backoffMs();
      }
      if (pause > 0 && this.#running) await this.#sleep(pause);
    }
  }

  #backoffMs(): number {
    return backoffDelay(this.#consecutiveFailures, this.#backoff, this.#random);
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#wake = done;
    });
  }

  async stop(): Promise<void> {
    this.#running = false;
    this.#wake?.();
    await this.#loop;
  }

  async stats(): Promise<RelayStats> {
    const backlog = await outboxStats(this.#substrate, { clock: this.#clock });
    const { rounds, delivered, failed, dead, blocked, unsent, deferred, leaseLost } = this.#totals;
    return {
      relayId: this.relayId,
      running: this.#running,
      rounds,
      delivered,
      failed,
      dead,
      blocked,
      unsent,
      deferred,
      leaseLost,
      consecutiveFailures: this.#consecutiveFailures,
      lastError: this.#lastError,
      lag: { pending: backlog.counts.PENDING, oldestPendingAgeMs: backlog.oldestPendingAgeMs },
    };
  }
}

/** A relay from one substrate's outbox to one sink. Nothing runs until runOnce(), drain() or start(). */
export function createRelay(options: RelayOptions): Relay {
  return new RelayImpl(options);
}
