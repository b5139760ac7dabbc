// The steps of recover(), in the order it runs them: each reads and fills the run's report, and writes
// only when the run says the store is writable. The order and the gating are recover.ts's.
import {
  ChainError,
  type ChainFailure,
  type Checkpoint,
  keyId,
  publicKeyBytes,
  type Signer,
} from "@leash/chain";
import type { Clock, Substrate } from "@leash/core";
import { createEngine, findRollback, type RollbackFinding, rollbackMessage } from "@leash/engine";
import { requeueDead } from "@leash/outbox";
import { keyInForce, scanChain } from "./chain-scan.js";
import { RecoveryError, type RecoveryErrorCode } from "./errors.js";
import { checkAllotments, describeViolation } from "./escrow-check.js";
import { checkOutbox, type OutboxCheck, reenqueueMissing, releaseLeases } from "./outbox-check.js";
import type { RecoverOptions, RecoveryReport } from "./recover-report.js";
import { recordRollbackAccepted } from "./rollback.js";
import { findStaleSessions } from "./stale.js";

const EXPIRE_BATCH = 500;

/** One run of recover(): its store, options and report, and what it is doing now (for a failure's message). */
export interface RecoverRun {
  readonly substrate: Substrate;
  readonly options: RecoverOptions;
  readonly clock: Clock;
  readonly report: RecoveryReport;
  readonly signer: Signer | undefined;
  stage: string;
}

export type ChainScanResult = Awaited<ReturnType<typeof scanChain>>;

/** What the engines recovery runs are told: the chain was just verified up to `head`. */
export interface VerifiedHere {
  readonly trustedKeys: RecoverOptions["publicKeys"];
  readonly trustedCheckpoint?: Checkpoint;
}

export function addProblem(
  report: RecoveryReport,
  code: RecoveryErrorCode,
  message: string,
  failure?: ChainFailure,
): void {
  report.problems.push(failure === undefined ? { code, message } : { code, message, failure });
}

/** 1. The checkpoint: undefined when none is kept, none was written yet, or it is unreadable (a problem). */
export async function readCheckpoint(run: RecoverRun): Promise<Checkpoint | undefined> {
  const { options, report } = run;
  if (options.checkpointStore === undefined) return undefined;
  try {
    const checkpoint = (await options.checkpointStore.read()) ?? undefined;
    report.chain.checkpoint.previous = checkpoint ?? null;
    if (checkpoint === undefined) {
      report.warnings.push({
        code: "checkpoint_missing",
        message: `no checkpoint at ${options.checkpointStore.location} (first start, or it was removed): a deleted tail cannot be detected this time`,
      });
    }
    return checkpoint;
  } catch (error) {
    if (!RecoveryError.isInstance(error)) throw error;
    addProblem(report, "checkpoint_unreadable", error.message);
    return undefined;
  }
}

/**
 * A store behind or forked from the checkpoint is a restored older copy: refused, or accepted on
 * purpose; either way its chain is then verified on its own, from the genesis (checkpoint undefined).
 */
export async function checkRollback(
  run: RecoverRun,
  checkpoint: Checkpoint | undefined,
): Promise<{ rollback: RollbackFinding | null; checkpoint: Checkpoint | undefined }> {
  const { options, report } = run;
  const accept = options.acceptRollback;
  let rollback: RollbackFinding | null = null;
  if (checkpoint !== undefined) {
    run.stage = "comparing the store's head with the checkpoint";
    rollback = await findRollback(run.substrate, checkpoint);
    if (rollback !== null) {
      report.chain.rollback = { ...rollback, accepted_seq: null };
      checkpoint = undefined;
      if (accept === undefined) {
        addProblem(report, "chain_rolled_back", rollbackMessage(rollback, options.checkpointStore?.location));
      }
    }
  }
  if (accept !== undefined && rollback === null) {
    report.warnings.push({
      code: "rollback_not_found",
      message:
        "acceptRollback: the store is neither behind nor forked from its checkpoint; nothing to accept",
    });
  }
  return { rollback, checkpoint };
}

/** The chain verified against the trusted keys and the checkpoint; the report says how far it got. */
export async function verifyStoreChain(
  run: RecoverRun,
  checkpoint: Checkpoint | undefined,
  reading: { pageSize: number; parallel: number },
): Promise<ChainScanResult> {
  const { report } = run;
  run.stage = "verifying the audit chain";
  let scan: ChainScanResult;
  try {
    scan = await scanChain(run.substrate, { publicKeys: run.options.publicKeys, checkpoint, ...reading });
  } catch (error) {
    if (ChainError.isInstance(error)) {
      throw new RecoveryError("invalid_argument", `cannot verify: ${error.message}`, { cause: error });
    }
    throw error;
  }
  const { result } = scan;
  if (result.ok) {
    report.chain.verified = true;
    report.chain.count = result.count;
    report.chain.head_hash = result.count === 0 ? null : result.head_hash;
    report.chain.chain_id = result.chain_id;
    report.chain.key_in_force = scan.last === null ? null : keyInForce(scan.last);
  } else {
    const f = result.failure;
    report.chain.count = result.count_verified;
    report.chain.failure = f;
    addProblem(
      report,
      "chain_unverifiable",
      `the audit chain fails verification at entry ${f.index} (seq ${f.seq ?? "unknown"}): ${f.kind}: ${f.message}`,
      f,
    );
  }
  return scan;
}

/** 2–3. The outbox: always counted; compared with the chain only when the chain is trustworthy. */
export async function checkStoreOutbox(run: RecoverRun, scan: ChainScanResult): Promise<OutboxCheck> {
  const { report } = run;
  run.stage = "reconciling the outbox";
  const nowNs = run.clock.nowNs();
  // entryIds holds exactly the verified entries when the chain verified.
  const outbox = await checkOutbox(run.substrate, scan.result.ok ? scan.entryIds : null, nowNs);
  report.outbox.counts = outbox.counts;
  report.outbox.missing = outbox.missing;
  report.outbox.orphans = outbox.orphans.map(({ seq, entry_id, problem }) => ({ seq, entry_id, problem }));
  report.outbox.expiredLeases = outbox.expiredLeases;
  report.outbox.liveLeases = outbox.liveLeases;
  report.outbox.dead = outbox.dead;
  if (outbox.orphans.length > 0) {
    const first = outbox.orphans[0]!;
    addProblem(
      report,
      "outbox_mismatch",
      `${outbox.orphans.length} outbox item(s) name entries the chain does not hold, first seq ${first.seq}: ${first.problem} (a lost chain tail or a damaged store)`,
    );
  }
  return outbox;
}

/** The signer must be the key a verifier expects next, or every entry written now would fail. */
export function checkSignerInForce(run: RecoverRun, scan: ChainScanResult): void {
  const { signer, report } = run;
  if (signer === undefined || !scan.result.ok) return;
  if (scan.last !== null) {
    const expected = keyInForce(scan.last);
    if (signer.keyId !== expected) {
      addProblem(
        report,
        "signer_mismatch",
        `the signing key ${signer.keyId} is not the key in force at the chain's head (${expected}): entries it signs would not verify; load the current key`,
      );
    }
  } else if (!run.options.publicKeys.some((k) => safeKeyId(k) === signer.keyId)) {
    addProblem(
      report,
      "signer_mismatch",
      `the signing key ${signer.keyId} is not among the trusted public keys: the genesis entry it would sign would not verify`,
    );
  }
}

/**
 * The head this run trusts: the verified one, or (an accepted rollback, when writable) the
 * rollback_accepted entry it appends first, so every entry this run writes follows the record.
 */
export async function acceptedHead(
  run: RecoverRun,
  scan: ChainScanResult,
  rollback: RollbackFinding | null,
  writable: boolean,
): Promise<Checkpoint | null> {
  const { result } = scan;
  const { report, signer } = run;
  const accept = run.options.acceptRollback;
  let head: Checkpoint | null =
    result.ok && result.count > 0 ? { count: result.count, head_hash: result.head_hash } : null;
  if (writable && result.ok && rollback !== null && accept !== undefined && signer !== undefined) {
    run.stage = "recording the accepted rollback";
    head = await recordRollbackAccepted(run.substrate, rollback, {
      signer,
      operatorId: accept.operatorId,
      nowNs: run.clock.nowNs(),
    });
    report.chain.rollback = { ...rollback, accepted_seq: head.count - 1 };
    report.actions.push(
      `accepted the rollback to ${rollback.store_head === null ? "an empty chain" : `entry ${rollback.store_head.seq}`} from entry ${rollback.checkpoint.count - 1} (rollback_accepted entry ${head.count - 1}, operator ${accept.operatorId})`,
    );
  }
  return head;
}

/** Re-enqueue what a lost enqueue left out; leave DEAD items unless asked; free the old relay's leases. */
export async function repairOutbox(
  run: RecoverRun,
  outbox: OutboxCheck,
  scan: ChainScanResult,
  gate: { writable: boolean; repair: boolean },
): Promise<void> {
  const { report, options, substrate } = run;
  const { writable, repair } = gate;
  if (writable && repair && outbox.missing.length > 0) {
    run.stage = "re-enqueueing entries missing from the outbox";
    report.outbox.reenqueued = await reenqueueMissing(substrate, outbox.missing, scan.entryIds);
    report.actions.push(
      `re-enqueued ${report.outbox.reenqueued.length} chain entries missing from the outbox`,
    );
  }
  const unqueued = outbox.missing.length - report.outbox.reenqueued.length;
  if (unqueued > 0) {
    report.warnings.push({
      code: "outbox_missing",
      message: `${unqueued} chain entr${unqueued === 1 ? "y is" : "ies are"} not in the outbox and will never be relayed (first seq ${outbox.missing.find((s) => !report.outbox.reenqueued.includes(s))}); run recovery with repair: true`,
    });
  }
  if (outbox.dead.length > 0) await requeueOrWarnDead(run, outbox, gate);
  if (writable && options.leaseOwner !== undefined) {
    run.stage = "releasing the restarted relay's leases";
    report.outbox.releasedLeases = await releaseLeases(substrate, options.leaseOwner, outbox.items);
    if (report.outbox.releasedLeases > 0) {
      report.actions.push(`released ${report.outbox.releasedLeases} outbox leases of ${options.leaseOwner}`);
    }
  }
}

async function requeueOrWarnDead(
  run: RecoverRun,
  outbox: OutboxCheck,
  { writable, repair }: { writable: boolean; repair: boolean },
): Promise<void> {
  const { report, options } = run;
  if (writable && repair && options.requeueDead === true) {
    run.stage = "requeueing DEAD outbox items";
    // Only the items this run saw DEAD (and lists in outbox.dead); fewer move when another process
    // requeued some of them meanwhile, which leaves nothing DEAD to warn about either.
    report.outbox.requeued = await requeueDead(run.substrate, {
      seqs: outbox.dead.map((item) => item.seq),
      clock: run.clock,
    });
    report.actions.push(
      `requeued ${report.outbox.requeued} DEAD outbox items for the relay (attempts reset, last_error kept)`,
    );
    return;
  }
  const first = outbox.dead[0]!;
  const hint = writable
    ? `; once the sink is fixed, requeue them with repair and requeueDead${options.requeueDead === true ? " (requeueDead needs repair)" : ""}`
    : "";
  report.warnings.push({
    code: "outbox_dead",
    message: `${outbox.dead.length} outbox item(s) are DEAD and will not be relayed (first seq ${first.seq}: ${first.last_error ?? "no error recorded"})${hint}`,
  });
}

/** 4a. Budget holds whose agent never reported back: charged through the engine when writable. */
export async function expireReservations(run: RecoverRun, writable: boolean, verifiedHere: VerifiedHere) {
  const { report, substrate, signer, clock } = run;
  run.stage = "expiring reservations";
  report.reservations.overdue = await substrate.transaction(
    async (tx) => (await tx.budgets.listExpired(clock.nowNs(), Number.MAX_SAFE_INTEGER)).length,
  );
  if (report.reservations.overdue === 0) return;
  if (writable && signer !== undefined) {
    // Through the engine, so each charge gets the engine's own "settled_by_expiry" entry.
    const engine = createEngine({ substrate, signer, clock, ...verifiedHere });
    for (;;) {
      const n = await engine.expireReservations(EXPIRE_BATCH);
      report.reservations.expired += n;
      if (n < EXPIRE_BATCH) break;
    }
    report.actions.push(
      `charged ${report.reservations.expired} expired budget holds at their estimate (settled_by_expiry entries)`,
    );
  } else {
    report.warnings.push({
      code: "reservations_overdue",
      message: `${report.reservations.overdue} budget hold(s) are past their TTL and still held${signer === undefined ? " (no signer: counted only)" : ""}`,
    });
  }
}

/** 4a'. Escrow: Σ allotments + spent ≤ limit and no shard past its allotment; dead shards' allotments return. */
export async function checkEscrow(run: RecoverRun, reclaim: boolean): Promise<void> {
  const { report } = run;
  run.stage = "checking budget allotments";
  report.escrow = await checkAllotments(run.substrate, { nowNs: run.clock.nowNs(), reclaim });
  for (const { account_id, violation } of report.escrow.violations) {
    addProblem(report, "escrow_violation", `budget escrow of ${account_id}: ${describeViolation(violation)}`);
  }
  if (report.escrow.reclaimed.length > 0) {
    report.actions.push(`returned ${report.escrow.reclaimed.length} dead shards' budget allotments`);
  }
}

/** 4b. HITL requests nobody answered in time: expired, so their agents are told hitl_timeout. */
export async function expireHitl(run: RecoverRun, writable: boolean, verifiedHere: VerifiedHere) {
  const { report, substrate, signer, clock } = run;
  run.stage = "expiring HITL requests";
  const hitlNow = clock.nowNs();
  report.hitl.overdue = await substrate.transaction(
    async (tx) =>
      (await tx.hitl.list({ status: "PENDING" })).filter(
        (r) => r.expires_ns !== null && r.expires_ns <= hitlNow,
      ).length,
  );
  if (report.hitl.overdue === 0) return;
  if (writable && signer !== undefined) {
    const engine = createEngine({ substrate, signer, clock, ...verifiedHere });
    report.hitl.expired = await engine.expireHitl();
    report.actions.push(`expired ${report.hitl.expired} unanswered HITL requests (hitl_expired entries)`);
  } else {
    report.warnings.push({
      code: "hitl_overdue",
      message: `${report.hitl.overdue} HITL request(s) are past their expiry and still pending${signer === undefined ? " (no signer: counted only)" : ""}`,
    });
  }
}

/** 4c. Sessions that stopped heartbeating (spec §4.5): marked STALE through the engine when writable. */
export async function markStaleSessions(
  run: RecoverRun,
  writable: boolean,
  verifiedHere: VerifiedHere,
  heartbeats: { intervalMs: number; missed: number },
) {
  const { report, substrate, signer } = run;
  const { intervalMs, missed } = heartbeats;
  run.stage = "marking stale sessions";
  const staleNs = missed * intervalMs * 1e6;
  const sessionsNow = run.clock.nowNs();
  const overdue = await findStaleSessions(substrate, sessionsNow, staleNs);
  report.sessions.overdue = overdue.map((s) => s.session_id);
  if (overdue.length === 0) return;
  if (writable && signer !== undefined) {
    // Through the engine, which writes the session_stale entry with the state change.
    const engine = createEngine({ substrate, signer, clock: { nowNs: () => sessionsNow }, ...verifiedHere });
    for (const session of overdue) {
      const entry = await engine.markStale(session.session_id, {
        staleAfterNs: staleNs,
        heartbeatIntervalMs: intervalMs,
        missedHeartbeats: missed,
      });
      if (entry !== null) report.sessions.markedStale.push(session.session_id);
    }
    if (report.sessions.markedStale.length > 0) {
      report.actions.push(
        `marked ${report.sessions.markedStale.length} sessions STALE (session_stale entries)`,
      );
    }
  } else {
    report.warnings.push({
      code: "sessions_overdue",
      message: `${overdue.length} session(s) missed ${missed} heartbeats${signer === undefined ? " (no signer: counted only)" : ""}`,
    });
  }
}

function safeKeyId(key: string | Uint8Array): string | null {
  try {
    return keyId(publicKeyBytes(key));
  } catch {
    return null;
  }
}
