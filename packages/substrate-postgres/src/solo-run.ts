// A transaction of its own on one connection (BEGIN, fn, COMMIT, retried on a serialization failure),
// and the rollback and COMMIT failures batches share. When a transaction runs alone is substrate.ts's.

import { setTimeout as sleep } from "node:timers/promises";
import type { SubstrateTx } from "@leash/core";
import { SubstrateError } from "@leash/core";
import type { PoolClient } from "pg";
import type { BatchMemory } from "./batch-memory.js";
import { BatchWrites, type MultiRowStatements } from "./batch-writes.js";
import { corkThisTurn } from "./cork.js";
import { toSubstrateError } from "./errors.js";
import type { PostgresSubstrateStats } from "./options.js";
import type { Statement, Statements } from "./sql.js";
import type { TxContext } from "./tx.js";
import type { Remembering } from "./tx-stores.js";

// Full-jitter exponential backoff: conflicting transactions wake at different times instead of
// colliding again, and the cap keeps the worst case for the default retries under a second.
const BACKOFF_BASE_MS = 2;
const BACKOFF_CAP_MS = 100;

export function isPipelined(client: PoolClient): boolean {
  return (client as { pipeline?: boolean }).pipeline === true;
}

export function gaveUp(maxRetries: number, last: unknown): SubstrateError {
  return new SubstrateError(
    "serialization",
    `transaction: still failing on a serialization failure or deadlock after ${maxRetries + 1} attempts`,
    { cause: last },
  );
}

/** What a transaction of its own needs of the substrate running it. */
export interface SoloHost {
  readonly counters: PostgresSubstrateStats;
  readonly maxRetries: number;
  readonly prepared: boolean;
  readonly sql: Statements;
  readonly multi: MultiRowStatements;
  readonly multiAppend: Statement;
  /** BEGIN for a transaction of its own: the batch lock in shared mode. */
  readonly beginSolo: string;
  connect(doing: string): Promise<PoolClient>;
  context(client: PoolClient, writes?: BatchWrites): TxContext;
  stores(ctx: TxContext, memory?: BatchMemory): SubstrateTx & Remembering;
}

type Attempt<T> = { ok: true; value: T } | { ok: false; error: unknown; retry: boolean };

export function backoff(step: number): Promise<void> {
  return sleep(Math.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** step));
}

/** Gives a connection back to the pool; passing an error makes the pool discard it instead of lending it out again. */
export function release(
  client: PoolClient,
  listener: (error: Error) => void,
  broken: Error | undefined,
): void {
  client.off("error", listener);
  client.release(broken);
}

export async function run<T>(host: SoloHost, fn: (tx: SubstrateTx) => Promise<T>): Promise<T> {
  let last: unknown;
  for (let attempt = 0; attempt <= host.maxRetries; attempt++) {
    if (attempt > 0) await backoff(attempt);
    const outcome = await tryAlone(host, fn);
    if (outcome.ok) return outcome.value;
    if (!outcome.retry) throw outcome.error;
    last = outcome.error;
  }
  throw gaveUp(host.maxRetries, last);
}

/** One try of a transaction of its own: BEGIN, fn, COMMIT. Says whether a failure is worth another try. */
async function tryAlone<T>(host: SoloHost, fn: (tx: SubstrateTx) => Promise<T>): Promise<Attempt<T>> {
  let client: PoolClient;
  try {
    client = await host.connect("transaction");
  } catch (error) {
    return { ok: false, error, retry: false };
  }
  // A checked-out client whose socket dies emits "error"; without a listener that kills the process.
  let broken: Error | undefined;
  const onError = (error: Error) => {
    broken = error;
  };
  client.on("error", onError);
  // Pipelined, deferred writes wait to go out a kind at a time (BatchWrites.solo); flushed before COMMIT.
  const writes = isPipelined(client) ? soloWrites(host, client) : undefined;
  const ctx = host.context(client, writes);
  try {
    if (isPipelined(client)) corkThisTurn(client);
    const begin = client.query(host.beginSolo);
    if (isPipelined(client)) {
      // Saves a round trip per transaction: the first read goes out without waiting for BEGIN.
      ctx.pipelineBegin(begin);
    } else {
      try {
        await begin;
      } catch (error) {
        const failure = toSubstrateError(error, "transaction: BEGIN");
        broken ??= await abort(client, failure);
        return { ok: false, error: failure, retry: false };
      }
    }
    let value: T;
    try {
      value = await fn(host.stores(ctx));
    } catch (error) {
      ctx.finished = true;
      await ctx.drain();
      await ctx.settleBegin();
      broken ??= await abort(client, ctx.failure);
      // A deadlock victim is retried even when fn wrapped or replaced the error it saw.
      if (ctx.failure?.code === "serialization") return { ok: false, error: ctx.failure, retry: true };
      return { ok: false, error, retry: false };
    }
    ctx.finished = true;
    writes?.flush();
    await ctx.drain();
    await ctx.settleBegin();
    if (ctx.failure !== null) {
      // fn swallowed a failed statement: PostgreSQL would answer COMMIT with a silent ROLLBACK.
      broken ??= await abort(client, ctx.failure);
      return { ok: false, error: ctx.failure, retry: ctx.failure.code === "serialization" };
    }
    try {
      await client.query("COMMIT");
    } catch (error) {
      const failure = toSubstrateError(error, "transaction: COMMIT");
      if (failure.code === "serialization") return { ok: false, error: failure, retry: true };
      broken ??= error as Error;
      return { ok: false, error: commitFailure(failure, error), retry: false };
    }
    return { ok: true, value };
  } finally {
    release(client, onError, broken);
  }
}

function soloWrites(host: SoloHost, client: PoolClient): BatchWrites {
  return BatchWrites.solo(
    client,
    host.prepared,
    host.multi,
    { single: host.sql.chain.append.op, multi: host.multiAppend },
    (rows) => {
      host.counters.multiRowWrites += rows;
    },
  );
}

/** A failed COMMIT; when the connection failed, whether it committed is unknown, and retrying could apply fn twice. */
export function commitFailure(failure: SubstrateError, error: unknown): SubstrateError {
  if (failure.code !== "io") return failure;
  return new SubstrateError(
    "io",
    `transaction: the connection failed during COMMIT, so whether it committed is unknown: ${failure.message}`,
    { cause: error },
  );
}

/** Rolls the open transaction back; returns the error that makes the connection unfit to lend out again. */
export async function abort(client: PoolClient, failure: SubstrateError | null): Promise<Error | undefined> {
  if (failure?.code === "io") return failure;
  try {
    await client.query("ROLLBACK");
    return undefined;
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}
