// Group commit's one batch: BEGIN and the batch lock, the queued transactions one after another in
// savepoints, one COMMIT, and how a batch that cannot commit settles. The lane and the pool are substrate.ts's.

import type { SubstrateTx } from "@leash/core";
import { SubstrateError } from "@leash/core";
import type { PoolClient } from "pg";
import { type BatchMemory, newBatchMemory } from "./batch-memory.js";
import { BatchWrites, type MultiRowStatements } from "./batch-writes.js";
import { corkThisTurn } from "./cork.js";
import { toSubstrateError } from "./errors.js";
import { DURABILITY_BARRIER, type GroupCommitOptions, type PostgresSubstrateStats } from "./options.js";
import { abort, commitFailure, gaveUp, isPipelined } from "./solo-run.js";
import type { Statement, Statements } from "./sql.js";
import type { TxContext } from "./tx.js";
import type { Remembering } from "./tx-stores.js";

export const SAVEPOINT = "leash_tx";

export interface Job {
  readonly fn: (tx: SubstrateTx) => Promise<unknown>;
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: unknown) => void;
  /** Serialization failures counted against this transaction (see retryBatch), for maxRetries. */
  failures: number;
}

/** A transaction that ran in the open batch: it settles when the batch does. */
export type Ran = { job: Job; ok: true; value: unknown } | { job: Job; ok: false; error: unknown };

/** How a batch ended, for the lane that ran it. */
export interface BatchEnd {
  /** The connection cannot be lent out again. */
  broken?: Error;
  /** Its transactions were queued again after a serialization failure: back off this many steps. */
  retryStep?: number;
}

/** The answer of beginBatchLock's try (a multi-statement query answers with one result per statement). */
function lockWasFree(answer: unknown): boolean | null {
  for (const result of Array.isArray(answer) ? answer : [answer]) {
    const free = (result as { rows?: Array<{ free?: unknown }> } | null)?.rows?.[0]?.free;
    if (typeof free === "boolean") return free;
  }
  return null;
}

/** What a batch needs of the substrate running it: its queue, counters and settings, and its stores. */
export interface BatchHost {
  /** Transactions waiting for a batch, oldest first. */
  readonly queue: Job[];
  readonly counters: PostgresSubstrateStats;
  readonly group: Required<GroupCommitOptions> | null;
  readonly maxRetries: number;
  readonly prepared: boolean;
  readonly sql: Statements;
  readonly multi: MultiRowStatements;
  readonly multiAppend: Statement;
  readonly beginBatch: string;
  readonly beginBatchLock: string;
  /** This handle's lone transactions running now. */
  readonly solos: number;
  /** Whether another handle held the batch lock when this handle's last judged batch began. */
  contended: boolean;
  context(client: PoolClient, writes?: BatchWrites): TxContext;
  stores(ctx: TxContext, memory?: BatchMemory): SubstrateTx & Remembering;
  /** Rejects the `count` oldest queued transactions with `error`. */
  shed(count: number, error: unknown): void;
  runAlone(job: Job): void;
}

/**
 * One batch: BEGIN and the batch lock, then queued transactions one after another, each in the
 * savepoint before it, as long as maxBatch and maxBatchMs allow, then one COMMIT. A transaction
 * whose fn throws (or whose statement failed) is rolled back to its savepoint, which also clears
 * PostgreSQL's aborted state, so the next one runs on. Everything settles when the batch ends:
 * the failed with their own errors, the rest with their values once COMMIT succeeded. On a
 * serialization failure anywhere (a deadlock with some other client, a trigger, COMMIT) the
 * whole batch is rolled back and its transactions queued again in order, failed ones included:
 * each may have seen what an earlier one wrote, which is gone now.
 */
export async function runBatch(
  host: BatchHost,
  client: PoolClient,
  brokenBy: () => Error | undefined,
): Promise<BatchEnd> {
  const pipelined = isPipelined(client);
  const begun = await beginBatch(host, client, pipelined);
  if (begun !== undefined) return begun;
  const batch = openBatch(host, client, pipelined, brokenBy);
  let job = host.queue.shift();
  while (job !== undefined) {
    const step = await runJob(host, batch, job);
    if ("end" in step) return step.end;
    job = step.next;
  }
  return endBatch(host, batch);
}

/** A batch between its BEGIN and its COMMIT. */
interface OpenBatch {
  readonly client: PoolClient;
  readonly brokenBy: () => Error | undefined;
  readonly memory: BatchMemory;
  readonly startedAt: number;
  /** Transactions queued when the batch got its lock: they always join, up to maxBatch. */
  readonly backlog: number;
  readonly ran: Ran[];
  /** Answers of SAVEPOINT, RELEASE and ROLLBACK TO sent without waiting; each resolves to its error or null. */
  readonly controls: Promise<unknown>[];
  readonly control: (text: string) => Promise<unknown>;
  /** Transactions whose savepoint was released, in order; answers of their deferred writes may still be coming. */
  readonly released: Released[];
  readonly writes: BatchWrites | undefined;
}

/** BEGIN and the batch lock; a batch end when that failed (nothing ran), else undefined. */
async function beginBatch(
  host: BatchHost,
  client: PoolClient,
  pipelined: boolean,
): Promise<BatchEnd | undefined> {
  const waiting = host.queue.length;
  const alone = host.solos === 0;
  try {
    // Pipelined, each transaction takes a savepoint only once it sends a statement (BatchWrites).
    const free = lockWasFree(await client.query(pipelined ? host.beginBatchLock : host.beginBatch));
    // Taken by another handle's transaction when this batch began: it, or others like it, will
    // be waiting for this one. Not judged while one of this handle's own lone transactions may
    // have held it.
    if (alone && host.solos === 0 && free !== null) host.contended = !free;
  } catch (error) {
    // Nothing ran; those that waited through this BEGIN fail with it, later arrivals get a new one.
    const failure = toSubstrateError(error, "transaction: BEGIN");
    host.shed(waiting, failure);
    return { broken: await abort(client, failure) };
  }
  return undefined;
}

function openBatch(
  host: BatchHost,
  client: PoolClient,
  pipelined: boolean,
  brokenBy: () => Error | undefined,
): OpenBatch {
  const startedAt = performance.now();
  const backlog = host.queue.length;
  const controls: Promise<unknown>[] = [];
  const control = async (text: string): Promise<unknown> => {
    if (pipelined) corkThisTurn(client);
    const answer = client.query(text).then(
      () => null,
      (error: unknown) => error ?? new Error(`${text} failed`),
    );
    controls.push(answer);
    // pg queues a query sent while another runs only in pipeline mode; otherwise wait for the answer.
    return pipelined ? null : answer;
  };
  // Pipelined only: without pipelining every statement waits for the one before anyway.
  const writes = pipelined
    ? new BatchWrites(
        client,
        host.prepared,
        host.multi,
        { single: host.sql.chain.append.op, multi: host.multiAppend },
        SAVEPOINT,
        (rows) => {
          host.counters.multiRowWrites += rows;
        },
        (text) => void control(text),
      )
    : undefined;
  const memory = newBatchMemory();
  return { client, brokenBy, memory, startedAt, backlog, ran: [], controls, control, released: [], writes };
}

/** Runs one queued transaction in the batch: how the batch ends, or the next transaction to run. */
async function runJob(
  host: BatchHost,
  batch: OpenBatch,
  job: Job,
): Promise<{ end: BatchEnd } | { next: Job | undefined }> {
  const { client, memory, ran, released, writes, control } = batch;
  const { maxBatch, maxBatchMs } = host.group!;
  const ctx = host.context(client, writes);
  const stores = host.stores(ctx, memory);
  let failed = false;
  let outcome: unknown;
  try {
    outcome = await job.fn(stores);
  } catch (error) {
    failed = true;
    outcome = error;
  }
  ctx.finished = true;
  // Written, not answered: its deferred writes are checked before COMMIT (see lateFailure), and
  // RELEASE and the next transaction go out behind them without waiting a round trip.
  await ctx.written();
  if (failed || ctx.failure !== null) {
    // What it held back goes nowhere; what it sent is undone by ROLLBACK TO below.
    writes?.drop(ctx);
    // Rolled back alone, as ever, but only once every answer before it is in: if a released
    // transaction's deferred write failed, this one only met the transaction that write aborted.
    await ctx.drain();
    const late = await lateFailure(released);
    if (late !== undefined) return { end: await undoBatch(host, client, ran, late, job) };
  }
  const failure = ctx.failure;
  // A deadlock victim is retried even when fn wrapped or replaced the error it saw.
  if (failure?.code === "serialization") {
    return { end: await retryBatch(host, client, [...ran.map((r) => r.job), job], job, failure, true) };
  }
  const dropped = batch.brokenBy();
  const lost =
    dropped !== undefined
      ? toSubstrateError(dropped, "transaction")
      : failure?.code === "io"
        ? failure
        : undefined;
  if (lost !== undefined)
    return { end: await loseBatch(host, client, ran, { job, error: failed ? outcome : lost }, lost) };
  if (!failed && failure !== null) {
    // fn swallowed a failed statement: it fails all the same, as it would alone.
    failed = true;
    outcome = failure;
  }
  ran.push(failed ? { job, ok: false, error: outcome } : { job, ok: true, value: outcome });
  // Its savepoint is released below (a refused RELEASE ends the batch, memory and all).
  if (!failed) {
    stores.rememberIn(memory);
    released.push({ job, ctx });
  }
  let refused: unknown = null;
  if (writes !== undefined) writes.endTransaction(ctx, !failed);
  else if (failed) refused = await control(`ROLLBACK TO SAVEPOINT ${SAVEPOINT}`);
  const next =
    refused === null &&
    ran.length < maxBatch &&
    (ran.length < batch.backlog || performance.now() - batch.startedAt < maxBatchMs)
      ? host.queue.shift()
      : undefined;
  // After ROLLBACK TO the savepoint still stands, empty, for the next transaction to run in.
  if (next !== undefined && !failed && writes === undefined) {
    refused = await control(`RELEASE SAVEPOINT ${SAVEPOINT}; SAVEPOINT ${SAVEPOINT}`);
    if (refused !== null) host.queue.unshift(next);
  }
  return { next: refused === null ? next : undefined };
}

/** After the last transaction: every answer checked, then COMMIT (and the durability barrier). */
async function endBatch(host: BatchHost, batch: OpenBatch): Promise<BatchEnd> {
  const { client, ran, released, writes } = batch;
  const jobs = ran.map((r) => r.job);
  writes?.flush();
  const answered = Promise.all(batch.controls);
  // Checked first: a failed deferred write makes every later statement, SAVEPOINTs included, fail too.
  const late = await lateFailure(released);
  if (late !== undefined) return undoBatch(host, client, ran, late, undefined);
  const refused = (await answered).find((answer) => answer !== null);
  if (refused !== undefined) {
    const failure = toSubstrateError(refused, "transaction: SAVEPOINT");
    if (failure.code === "serialization") {
      return retryBatch(host, client, jobs, undefined, failure, true);
    }
    return loseBatch(host, client, ran, undefined, failure);
  }
  if (!ran.some((r) => r.ok)) {
    const broken = await abort(client, null);
    settle(host, ran, null);
    return { broken };
  }
  return commitBatch(host, client, ran);
}

async function commitBatch(host: BatchHost, client: PoolClient, ran: readonly Ran[]): Promise<BatchEnd> {
  const jobs = ran.map((r) => r.job);
  const { earlyLockRelease } = host.group!;
  const early = earlyLockRelease === "always" || (earlyLockRelease === "auto" && host.contended);
  let command: string;
  try {
    // Sent with the COMMIT, in the same round trip on a pipelined connection.
    const asynchronous = early ? client.query("SET LOCAL synchronous_commit TO off") : null;
    const [, committed] = await Promise.allSettled([asynchronous, client.query("COMMIT")]);
    // Had the SET failed, the transaction was aborted and COMMIT answers ROLLBACK (checked below).
    if (committed.status === "rejected") throw committed.reason;
    ({ command } = committed.value);
  } catch (error) {
    const failure = toSubstrateError(error, "transaction: COMMIT");
    // A failed COMMIT has ended the transaction: nothing to roll back.
    if (failure.code === "serialization") {
      return retryBatch(host, client, jobs, undefined, failure, false);
    }
    settle(host, ran, commitFailure(failure, error));
    return { broken: error instanceof Error ? error : new Error(String(error)) };
  }
  if (command !== "COMMIT") {
    // PostgreSQL answers COMMIT of an aborted transaction with ROLLBACK; every control answer was
    // checked above, so this is not expected, but it must never pass for a commit.
    const failure = new SubstrateError("io", `transaction: COMMIT was answered with ${command}`);
    settle(host, ran, failure);
    return {};
  }
  host.counters.commits++;
  if (early) host.counters.earlyLockReleases++;
  host.counters.largestBatch = Math.max(host.counters.largestBatch, ran.length);
  try {
    if (early) await client.query(DURABILITY_BARRIER);
  } catch (error) {
    // Committed, and visible to others, but perhaps not yet on disk: as when a COMMIT's answer is lost.
    const failure = toSubstrateError(error, "transaction: durability barrier");
    settle(
      host,
      ran,
      new SubstrateError(
        "io",
        `transaction: committed, but the wait for its write-ahead log to reach disk failed, so whether it is durable is unknown: ${failure.message}`,
        { cause: error },
      ),
    );
    return { broken: error instanceof Error ? error : new Error(String(error)) };
  }
  settle(host, ran, null);
  return {};
}

/** Settles a batch's transactions: the failed with their errors, the rest with `failure` or their values. */
function settle(host: BatchHost, ran: readonly Ran[], failure: SubstrateError | null): void {
  for (const r of ran) {
    if (r.ok && failure === null) {
      host.counters.committed++;
      r.job.resolve(r.value);
    } else {
      host.counters.rolledBack++;
      r.job.reject(r.ok ? failure : r.error);
    }
  }
}

/**
 * After a serialization failure: roll back, give up on those out of retries, queue the rest again
 * in order. A failure raised in one transaction's statement (`blamed`) counts against that one
 * only, so one that keeps failing cannot use up the retries of those sharing its batches; one at
 * COMMIT (a deferred trigger) cannot be told apart and counts against all.
 */
async function retryBatch(
  host: BatchHost,
  client: PoolClient,
  jobs: readonly Job[],
  blamed: Job | undefined,
  failure: SubstrateError,
  rollback: boolean,
): Promise<BatchEnd> {
  const broken = rollback ? await abort(client, failure) : undefined;
  const again: Job[] = [];
  let step = 0;
  for (const job of jobs) {
    if (blamed === undefined || job === blamed) job.failures++;
    if (job.failures > host.maxRetries) {
      host.counters.rolledBack++;
      job.reject(gaveUp(host.maxRetries, failure));
    } else {
      again.push(job);
      step = Math.max(step, job.failures);
    }
  }
  host.queue.unshift(...again);
  return step === 0 ? { broken } : { broken, retryStep: step };
}

/**
 * A deferred write of a released transaction (`late.job`) failed: its savepoint is gone, so only
 * the whole batch can be rolled back. A serialization failure re-runs the batch (counted against
 * that transaction), an "io" failure loses it; otherwise that transaction fails with its error and
 * the others, `current` (the one running, not released) included, are queued again, in order, to
 * run in a new batch: each may have seen what the failed one wrote.
 */
async function undoBatch(
  host: BatchHost,
  client: PoolClient,
  ran: readonly Ran[],
  late: LateFailure,
  current: Job | undefined,
): Promise<BatchEnd> {
  const jobs = ran.map((r) => r.job);
  if (current !== undefined) jobs.push(current);
  const failure = toSubstrateError(late.error, "transaction");
  if (failure.code === "serialization") return retryBatch(host, client, jobs, late.job, failure, true);
  if (late.shared && failure.code !== "io") {
    // A multi-row write failed as a whole: whose row it was cannot be told, so each transaction
    // runs again alone, where its writes go out one by one and a bad one fails only its own.
    const broken = await abort(client, failure);
    for (const again of jobs) host.runAlone(again);
    return { broken };
  }
  if (failure.code === "io") {
    // The one running fails with the batch (ok: its own outcome only met the aborted transaction).
    const lost: Ran[] = ran.map((r) => (r.job === late.job ? late : r));
    if (current !== undefined) lost.push({ job: current, ok: true, value: undefined });
    return loseBatch(host, client, lost, undefined, failure);
  }
  const broken = await abort(client, failure);
  host.counters.rolledBack++;
  late.job.reject(failure);
  host.queue.unshift(...jobs.filter((job) => job !== late.job));
  return { broken };
}

/**
 * The batch cannot commit (its connection failed, or a savepoint statement did): nothing of it
 * is committed. The transaction that was running fails with its own error, as do those that had
 * failed already; those that had succeeded fail with `failure`.
 */
async function loseBatch(
  host: BatchHost,
  client: PoolClient,
  ran: readonly Ran[],
  current: { job: Job; error: unknown } | undefined,
  failure: SubstrateError,
): Promise<BatchEnd> {
  const broken = await abort(client, failure);
  const lost = new SubstrateError(
    failure.code,
    `transaction: rolled back with the rest of its batch before COMMIT: ${failure.message}`,
    { cause: failure },
  );
  settle(host, ran, lost);
  if (current !== undefined) {
    host.counters.rolledBack++;
    current.job.reject(current.error);
  }
  return { broken };
}

/** A transaction of a batch whose savepoint was released, with the context its deferred answers reach. */
interface Released {
  readonly job: Job;
  readonly ctx: TxContext;
}

/**
 * Waits for the answers of the released transactions' deferred writes and returns the first that
 * failed (after it, PostgreSQL answers everything with 25P02, which later ones must not be blamed for).
 */
async function lateFailure(released: readonly Released[]): Promise<LateFailure | undefined> {
  await Promise.all(released.map((r) => r.ctx.drain()));
  const culprit = released.find((r) => r.ctx.failure !== null);
  return culprit === undefined
    ? undefined
    : { job: culprit.job, ok: false, error: culprit.ctx.failure, shared: culprit.ctx.sharedFailure };
}

/** A released transaction's deferred write that failed; `shared` when it cannot be pinned on it alone. */
type LateFailure = Ran & { ok: false; shared: boolean };
