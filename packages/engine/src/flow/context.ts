// What every flow of the engine shares: its settings (checked once), its non-determinism (clock, rng,
// ids), the chain's trust and signer, the projection and the write transaction. No flow of its own.

import { randomUUID } from "node:crypto";
import type { ChainEntryRecord, Clock, Substrate, SubstrateTx } from "@leash/core";
import { DEFAULT_HOLD_TTL_NS, type Env, MAX_RESERVATION_TTL_S } from "@leash/machine";
import { systemClock } from "@leash/outbox";
import { Auditor } from "../audit.js";
import { ChainTrust, trustedKeyMap } from "../chain-trust.js";
import { CheckpointWriter, checkpointIntervalOf } from "../checkpoint-writer.js";
import { LeashError } from "../errors.js";
import { HitlEvents } from "../hitl-events.js";
import { EnginePolicies } from "../policy-runtime.js";
import { Projection, type ProjectionTx } from "../projection.js";
import { StateAuth } from "../state-auth.js";
import { EngineTracing } from "../tracing.js";
import type { EngineOptions } from "../types.js";
import type { EvaluateContext } from "./evaluate-call.js";
import { envOf } from "./run.js";

const DEFAULT_HITL_POLL_MS = 500;

/** The most calls one evaluate transaction judges (batcher.ts). */
const DEFAULT_MAX_BATCH = 64;

export interface EngineContext {
  readonly substrate: Substrate;
  readonly clock: Clock;
  readonly rng: () => number;
  readonly newId: () => string;
  readonly ttlNs: number;
  readonly pollMs: number;
  readonly maxBatch: number;
  readonly events: HitlEvents;
  readonly policies: EnginePolicies | null;
  readonly trust: ChainTrust;
  readonly checkpoints: CheckpointWriter | null;
  readonly auditor: Auditor;
  readonly tracing: EngineTracing;
  readonly projection: Projection;
  readonly evalContext: EvaluateContext;
  /** The Env of one command at `nowNs` (flow/run.ts): the rng and a new id drawn once if it needs them. */
  envAt(nowNs: number): Env;
  signedByKnownKey(entry: ChainEntryRecord): boolean;
  inProjection<T>(fn: (ptx: ProjectionTx) => Promise<T>, judged?: () => void): Promise<T>;
  /** A write transaction other than evaluate's (register, postExec, answers, resets, expiries, …). */
  transaction<T>(fn: (tx: SubstrateTx) => Promise<T>): Promise<T>;
}

/**
 * The hold TTL in nanoseconds, checked here so a bad value is a clear error at creation, not an
 * internal one at the first ALLOW (an expiry past 2^63 ns overflows the stores' integer columns).
 */
function reservationTtlNs(ms: number | undefined): number {
  if (ms === undefined) return DEFAULT_HOLD_TTL_NS;
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms <= 0 || ms > MAX_RESERVATION_TTL_S * 1000) {
    throw new LeashError(
      "invalid_argument",
      `reservationTtlMs must be a positive number of milliseconds up to ${MAX_RESERVATION_TTL_S * 1000} (365 days), got ${String(ms)}`,
    );
  }
  return ms * 1e6;
}

/** The numeric settings, checked (a bad one is an error at creation). */
function settingsOf(options: EngineOptions) {
  const pollMs = options.hitlPollMs ?? DEFAULT_HITL_POLL_MS;
  if (typeof pollMs !== "number" || !Number.isFinite(pollMs) || pollMs <= 0) {
    throw new LeashError("invalid_argument", `hitlPollMs must be a positive number, got ${String(pollMs)}`);
  }
  const maxBatch = options.maxBatch ?? DEFAULT_MAX_BATCH;
  if (!Number.isSafeInteger(maxBatch) || maxBatch < 1) {
    throw new LeashError(
      "invalid_argument",
      `maxBatch must be a whole number of at least 1, got ${String(maxBatch)}`,
    );
  }
  return {
    clock: options.clock ?? systemClock,
    rng: options.rng ?? Math.random,
    ttlNs: reservationTtlNs(options.reservationTtlMs),
    newId: options.newId ?? randomUUID,
    pollMs,
    maxBatch,
  };
}

/** Opening the store (chain-trust.ts): verified once before the first call, and at every append. */
function chainOf(options: EngineOptions) {
  if (options.signer === undefined) {
    throw new LeashError(
      "invalid_argument",
      "createEngine needs a signer: every decision is signed into the audit chain",
    );
  }
  const trust = new ChainTrust({
    substrate: options.substrate,
    trustedKeys: trustedKeyMap([...(options.trustedKeys ?? []), options.signer.publicKeyHex]),
    readCheckpoint: async () => options.trustedCheckpoint ?? (await options.checkpointStore?.read()) ?? null,
    ...(options.checkpointStore === undefined
      ? {}
      : { checkpointLocation: options.checkpointStore.location }),
  });
  // The last trusted head, kept outside the store as the chain grows (a restored older copy is refused).
  const checkpoints =
    options.checkpointStore === undefined
      ? null
      : new CheckpointWriter(
          options.checkpointStore,
          () => trust.checkpoint,
          checkpointIntervalOf(options.checkpointIntervalMs),
          options.onCheckpointError,
        );
  return { trust, checkpoints, auditor: new Auditor(options.signer, trust) };
}

/**
 * Every write transaction of the engine runs on the projection (projection.ts): it reads the chain
 * head first (under the store's write lock; on PostgreSQL every writer then takes the head's lock
 * before any row's, so two never wait on each other in a cycle), folds in what others appended,
 * serves sessions and accounts from memory, and writes each one it changed once, stamped, before
 * COMMIT. The auditor and the projection learn of the transaction only once it has committed
 * (the last try, after a substrate's retries).
 */
function inProjectionOf(
  substrate: Substrate,
  chain: ReturnType<typeof chainOf>,
  projection: Projection,
): EngineContext["inProjection"] {
  const { trust, auditor, checkpoints } = chain;
  return async (fn, judged) => {
    // Nothing reaches the store before its chain verified (fail closed; see ChainTrust).
    if (!trust.trusted) await trust.ready();
    let ptx: ProjectionTx | undefined;
    try {
      const value = await substrate.transaction(async (tx) => {
        // A substrate's retry starts afresh: the try before never reached the store.
        if (ptx !== undefined) projection.failed(ptx);
        ptx = projection.begin(tx);
        await ptx.open();
        await trust.checkHeadRow(tx, ptx.headNow());
        const result = await fn(ptx);
        await ptx.flush();
        projection.judged(ptx);
        judged?.();
        return result;
      });
      projection.committed(ptx!);
      auditor.committed(ptx!);
      checkpoints?.poke();
      return value;
    } catch (error) {
      if (ptx !== undefined) projection.failed(ptx);
      throw error;
    }
  };
}

export function engineContext(options: EngineOptions): EngineContext {
  const settings = settingsOf(options);
  const { clock, rng, newId, ttlNs } = settings;
  // The operator's policy layer (policy-layer.ts), when one is configured.
  const policies = options.policy === undefined ? null : new EnginePolicies(options.policy);
  const chain = chainOf(options);
  const { trust, auditor } = chain;
  // Rows read from the store are checked against the entries that stamped them (state-auth.ts).
  const projection = new Projection(
    new StateAuth(
      (entry) => trust.vouchesForStamp(entry),
      (tx) => auditor.checkChain(tx),
    ),
  );
  const inProjection = inProjectionOf(options.substrate, chain, projection);
  return {
    substrate: options.substrate,
    ...settings,
    ...chain,
    events: new HitlEvents(),
    policies,
    tracing: new EngineTracing(options.tracer),
    projection,
    evalContext: { nowNs: () => clock.nowNs(), rng, newId, holdTtlNs: ttlNs, auditor, policies },
    envAt: (nowNs) => envOf(nowNs, rng, newId, ttlNs),
    signedByKnownKey: (entry) => trust.signedByKnownKey(entry),
    inProjection,
    transaction: (fn) => (policies === null ? inProjection(fn) : policies.around(inProjection, fn)),
  };
}
