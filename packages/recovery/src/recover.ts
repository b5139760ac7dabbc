// recover(): what a Leash process runs at every start, before it serves — verify, reconcile, expire, mark.
// It never rewrites a verified entry and never writes on top of a chain that failed: it reports instead.
import {
  ChainError,
  type ChainFailure,
  type Checkpoint,
  keyId,
  publicKeyBytes,
  type Signer,
} from "@leash/chain";
import type { Clock, OutboxStatus, Substrate } from "@leash/core";
import {
  createEngine,
  findRollback,
  type RollbackFinding,
  rollbackMessage,
  systemClock,
} from "@leash/engine";
import { requeueDead } from "@leash/outbox";
import { keyInForce, scanChain } from "./chain-scan.js";
import type { CheckpointStore } from "./checkpoint.js";
import { RecoveryError, type RecoveryErrorCode } from "./errors.js";
import { checkAllotments, describeViolation, type EscrowCheck } from "./escrow-check.js";
import { checkOutbox, reenqueueMissing, releaseLeases } from "./outbox-check.js";
import type { ReplayMismatch } from "./replay/replay.js";
import { replayChain, storedParams } from "./replay/replay-chain.js";
import { recordRollbackAccepted } from "./rollback.js";
import {
  compareSnapshots,
  describeDifferences,
  repairSnapshots,
  type SnapshotDifference,
} from "./snapshot-check.js";
import { findStaleSessions } from "./stale.js";

export interface RecoverOptions {
  /** Keys trusted to sign from the genesis on (hex or raw bytes); later keys come from key_rotation entries. */
  publicKeys: readonly (string | Uint8Array)[];
  /**
   * The key in force at the chain's head. With it, recovery expires leaked budget holds and marks
   * stale sessions, each with a signed chain entry; without it, it only counts them.
   */
  signer?: Signer;
  /** Where the last trusted checkpoint lives (see fileCheckpointStore). Without one, a deleted tail goes unseen. */
  checkpointStore?: CheckpointStore;
  clock?: Clock;
  /** Spec §4.5: agents heartbeat every 30 s … */
  heartbeatIntervalMs?: number;
  /** … and 3 missed heartbeats make a session STALE. */
  staleAfterMissed?: number;
  /** Re-enqueue chain entries the outbox lacks (and, with requeueDead, revive DEAD items). Default false: report only. */
  repair?: boolean;
  /**
   * With repair: move the DEAD outbox items back to PENDING (attempts reset, last_error kept behind a
   * "requeued at" prefix) so the relay delivers them again. For after the sink that refused them was
   * fixed: an unfixed sink only kills them again. Without repair it changes nothing.
   */
  requeueDead?: boolean;
  /**
   * The relay id this process's relay used before the restart: its leases are freed at once instead
   * of being waited out. Give it only when that id cannot belong to a relay still running elsewhere.
   */
  leaseOwner?: string;
  /** The store's URL, for the `leash verify --store …` hint in messages (a password in it is masked). */
  storeUrl?: string;
  /** Chain entries read per transaction while verifying (default 1,000). */
  pageSize?: number;
  /** Signature checks kept in flight on the libuv pool while verifying (default 8; 1 = synchronous). */
  verifyParallel?: number;
  /**
   * Replay the verified chain and compare the snapshot tables with it (default true): a hand-edited
   * spent_usd, circuit flag, counter, nonce or hold is a problem (fail closed). With `repair` and a
   * signer the differing rows are rewritten from the chain, with a "snapshot_repaired" entry.
   */
  checkSnapshots?: boolean;
  /**
   * The operator restored an older copy of the store on purpose: a chain behind or forked from the
   * checkpoint is then accepted (when nothing else is wrong) with a signed "rollback_accepted" entry
   * naming both heads and `operatorId`, and the checkpoint moves to that entry. Needs the signer.
   */
  acceptRollback?: { operatorId: string };
}

/** A problem that makes the store unfit to serve. */
export interface RecoveryProblem {
  code: RecoveryErrorCode;
  message: string;
  /** For chain failures: where (as verifyChain reports it). */
  failure?: ChainFailure;
}

export type RecoveryWarningCode =
  | "checkpoint_missing"
  | "rollback_not_found"
  | "outbox_missing"
  | "outbox_dead"
  | "reservations_overdue"
  | "hitl_overdue"
  | "sessions_overdue";

/** Something an operator should know about that does not stop serving. */
export interface RecoveryWarning {
  code: RecoveryWarningCode;
  message: string;
}

export interface RecoveryReport {
  /** False: a daemon must refuse to serve (assertRecovered throws). */
  ok: boolean;
  problems: RecoveryProblem[];
  warnings: RecoveryWarning[];
  /** What recovery changed, one line each (empty when it changed nothing). */
  actions: string[];
  startedNs: number;
  durationMs: number;
  /** How to look at the chain yourself: `leash verify --store … --pubkey …`. */
  inspect: string;
  chain: {
    verified: boolean;
    /** Entries verified (the whole chain when verified). */
    count: number;
    head_hash: string | null;
    chain_id: string | null;
    failure: ChainFailure | null;
    /** The key id that must sign the next entry, when the chain verified. */
    key_in_force: string | null;
    checkpoint: {
      location: string | null;
      /** The checkpoint verified against (null: none kept, none yet, or unreadable). */
      previous: Checkpoint | null;
      /** The checkpoint written after this run, or null when none was written. */
      written: Checkpoint | null;
    };
    /** The store is behind or forked from the checkpoint (a restored older copy); null when not. */
    rollback: (RollbackFinding & { accepted_seq: number | null }) | null;
  };
  outbox: {
    counts: Record<OutboxStatus, number>;
    /** Chain seqs that had no outbox item when recovery looked. */
    missing: number[];
    /** Those of them queued again by this run (repair). */
    reenqueued: number[];
    orphans: { seq: number; entry_id: string; problem: string }[];
    /** PENDING items whose lease ran out (the next claim takes them). */
    expiredLeases: number;
    /** PENDING items leased until later, by holder. */
    liveLeases: Record<string, number>;
    /** Leases of `leaseOwner` freed by this run. */
    releasedLeases: number;
    /** DEAD items when recovery looked (before any requeue). */
    dead: { seq: number; entry_id: string; attempts: number; last_error: string | null }[];
    /** Of them, moved back to PENDING by this run (repair with requeueDead). */
    requeued: number;
  };
  /**
   * Budget escrow (docs/architecture.md "Escrow"): the allotment invariants of every shared account,
   * and dead shards' allotments returned after their lease (with repair) or left for their holds.
   */
  escrow: EscrowCheck;
  reservations: {
    /** PENDING budget holds past their TTL when recovery looked. */
    overdue: number;
    /** Charged at their estimate by this run, each with a "settled_by_expiry" chain entry. */
    expired: number;
  };
  snapshots: {
    /** Whether the chain was replayed and the snapshot tables compared with it. */
    checked: boolean;
    /** Entries replayed. */
    replayed: number;
    /** Decisions whose verdict was re-derived; from which entry every verdict was (see ReplayResult). */
    verdicts_checked: number;
    proved_from: number;
    /** The first entry whose recorded verdict or state does not follow from the ones before it. */
    replay_mismatch: ReplayMismatch | null;
    /** Snapshot values that differ from the replayed chain, when recovery looked. */
    differences: SnapshotDifference[];
    /** Of them, rewritten from the chain by this run (repair), and the entry that records it. */
    repaired: number;
    repair_entry_seq: number | null;
  };
  hitl: {
    /** PENDING HITL requests past their expiry when recovery looked. */
    overdue: number;
    /** Expired by this run, each with a "hitl_expired" chain entry (operator "system:timeout"). */
    expired: number;
  };
  sessions: {
    /** ACTIVE/PAUSED sessions past staleAfterMissed × heartbeatIntervalMs without a heartbeat. */
    overdue: string[];
    /** Set STALE by this run, each with a "session_stale" chain entry. */
    markedStale: string[];
  };
}

const EXPIRE_BATCH = 500;

function positive(name: string, value: number): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new RecoveryError("invalid_argument", `${name} must be a positive number, got ${String(value)}`);
  }
  return value;
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RecoveryError("invalid_argument", `${name} must be a positive integer, got ${String(value)}`);
  }
  return value;
}

/** The URL with any password masked: the hint ends up in logs. */
export function redactUrl(url: string): string {
  return url
    .replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@]*):[^@/]*@/i, "$1:***@")
    .replace(/([?&]password=)[^&#]*/gi, "$1***");
}

function inspectHint(options: RecoverOptions): string {
  const store = options.storeUrl === undefined ? "<store URL>" : redactUrl(options.storeUrl);
  const first = options.publicKeys[0];
  let key = "<public key>";
  try {
    if (first !== undefined) key = Buffer.from(publicKeyBytes(first)).toString("hex");
  } catch {
    // A bad key is reported by verification; the hint keeps its placeholder.
  }
  const checkpoint =
    options.checkpointStore === undefined ? "" : ` --checkpoint ${options.checkpointStore.location}`;
  return `leash verify --store ${store} --pubkey ${key}${checkpoint}`;
}

/**
 * Checks and repairs a store before a Leash process serves from it. In order:
 * 1. verifies the whole audit chain against the trusted keys and the last checkpoint (a deleted tail
 *    or rewritten history fails as "truncated"; a torn write as "edited" or "removed");
 * 2. reconciles the outbox with the chain: items without their entry are an error; entries without an
 *    item are re-enqueued with `repair` (the entries themselves are never touched);
 *    with `repair` and `requeueDead`, DEAD items go back to PENDING for the relay;
 * 3. frees `leaseOwner`'s leases and counts the rest (expired leases are reclaimable by design);
 * 4. with a signer: charges budget holds past their TTL at their estimate through the engine (one
 *    "settled_by_expiry" entry each: an ALLOWed call may have run, so its money is not given back) and marks sessions STALE after missed heartbeats (one "session_stale" entry each);
 *    without one, counts them;
 * 5. writes the new checkpoint when nothing is wrong.
 * Nothing is written when the chain fails or the signer is not the key in force: the report says
 * ok: false and assertRecovered(report) throws. Storage failures reject with RecoveryError "store_failed".
 */
export async function recover(substrate: Substrate, options: RecoverOptions): Promise<RecoveryReport> {
  if (!Array.isArray(options?.publicKeys) || options.publicKeys.length === 0) {
    throw new RecoveryError("invalid_argument", "recover needs at least one trusted public key (publicKeys)");
  }
  const clock = options.clock ?? systemClock;
  const intervalMs = positive("heartbeatIntervalMs", options.heartbeatIntervalMs ?? 30_000);
  const missed = positive("staleAfterMissed", options.staleAfterMissed ?? 3);
  const pageSize = positiveInteger("pageSize", options.pageSize ?? 1000);
  const parallel = positiveInteger("verifyParallel", options.verifyParallel ?? 8);
  const repair = options.repair ?? false;
  const signer = options.signer;
  if (
    options.leaseOwner !== undefined &&
    (typeof options.leaseOwner !== "string" || options.leaseOwner === "")
  ) {
    throw new RecoveryError("invalid_argument", "leaseOwner must be a non-empty relay id");
  }
  const accept = options.acceptRollback;
  if (accept !== undefined) {
    if (typeof accept.operatorId !== "string" || accept.operatorId === "") {
      throw new RecoveryError("invalid_argument", "acceptRollback needs the operator's id (operatorId)");
    }
    if (signer === undefined) {
      throw new RecoveryError(
        "invalid_argument",
        "accepting a rollback writes a signed entry: give the signing key (the key in force at the restored head)",
      );
    }
  }
  const startedNs = clock.nowNs();
  const started = performance.now();
  const report: RecoveryReport = {
    ok: true,
    problems: [],
    warnings: [],
    actions: [],
    startedNs,
    durationMs: 0,
    inspect: inspectHint(options),
    chain: {
      verified: false,
      count: 0,
      head_hash: null,
      chain_id: null,
      failure: null,
      key_in_force: null,
      checkpoint: { location: options.checkpointStore?.location ?? null, previous: null, written: null },
      rollback: null,
    },
    outbox: {
      counts: { PENDING: 0, DELIVERED: 0, DEAD: 0 },
      missing: [],
      reenqueued: [],
      orphans: [],
      expiredLeases: 0,
      liveLeases: {},
      releasedLeases: 0,
      dead: [],
      requeued: 0,
    },
    reservations: { overdue: 0, expired: 0 },
    escrow: { accounts: 0, allotments: 0, violations: [], reclaimed: [], heldBack: [] },
    snapshots: {
      checked: false,
      replayed: 0,
      verdicts_checked: 0,
      proved_from: 0,
      replay_mismatch: null,
      differences: [],
      repaired: 0,
      repair_entry_seq: null,
    },
    hitl: { overdue: 0, expired: 0 },
    sessions: { overdue: [], markedStale: [] },
  };
  const problem = (code: RecoveryErrorCode, message: string, failure?: ChainFailure) => {
    report.problems.push(failure === undefined ? { code, message } : { code, message, failure });
  };

  let stage = "reading the checkpoint";
  try {
    // 1. The checkpoint, then the chain against it.
    let checkpoint: Checkpoint | undefined;
    if (options.checkpointStore !== undefined) {
      try {
        checkpoint = (await options.checkpointStore.read()) ?? undefined;
        report.chain.checkpoint.previous = checkpoint ?? null;
        if (checkpoint === undefined) {
          report.warnings.push({
            code: "checkpoint_missing",
            message: `no checkpoint at ${options.checkpointStore.location} (first start, or it was removed): a deleted tail cannot be detected this time`,
          });
        }
      } catch (error) {
        if (!RecoveryError.isInstance(error)) throw error;
        problem("checkpoint_unreadable", error.message);
      }
    }

    // A store behind or forked from the checkpoint is a restored older copy: refused, or accepted on
    // purpose; either way its chain is then verified on its own, from the genesis.
    let rollback: RollbackFinding | null = null;
    if (checkpoint !== undefined) {
      stage = "comparing the store's head with the checkpoint";
      rollback = await findRollback(substrate, checkpoint);
      if (rollback !== null) {
        report.chain.rollback = { ...rollback, accepted_seq: null };
        checkpoint = undefined;
        if (accept === undefined) {
          problem("chain_rolled_back", rollbackMessage(rollback, options.checkpointStore?.location));
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

    stage = "verifying the audit chain";
    let scan: Awaited<ReturnType<typeof scanChain>>;
    try {
      scan = await scanChain(substrate, { publicKeys: options.publicKeys, checkpoint, pageSize, parallel });
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
      problem(
        "chain_unverifiable",
        `the audit chain fails verification at entry ${f.index} (seq ${f.seq ?? "unknown"}): ${f.kind}: ${f.message}`,
        f,
      );
    }

    // 2–3. The outbox: always counted; compared with the chain only when the chain is trustworthy.
    stage = "reconciling the outbox";
    const nowNs = clock.nowNs();
    // entryIds holds exactly the verified entries when the chain verified.
    const outbox = await checkOutbox(substrate, result.ok ? scan.entryIds : null, nowNs);
    report.outbox.counts = outbox.counts;
    report.outbox.missing = outbox.missing;
    report.outbox.orphans = outbox.orphans.map(({ seq, entry_id, problem }) => ({ seq, entry_id, problem }));
    report.outbox.expiredLeases = outbox.expiredLeases;
    report.outbox.liveLeases = outbox.liveLeases;
    report.outbox.dead = outbox.dead;
    if (outbox.orphans.length > 0) {
      const first = outbox.orphans[0]!;
      problem(
        "outbox_mismatch",
        `${outbox.orphans.length} outbox item(s) name entries the chain does not hold, first seq ${first.seq}: ${first.problem} (a lost chain tail or a damaged store)`,
      );
    }

    // The signer must be the key a verifier expects next, or every entry written now would fail.
    if (signer !== undefined && result.ok) {
      if (scan.last !== null) {
        const expected = keyInForce(scan.last);
        if (signer.keyId !== expected) {
          problem(
            "signer_mismatch",
            `the signing key ${signer.keyId} is not the key in force at the chain's head (${expected}): entries it signs would not verify; load the current key`,
          );
        }
      } else if (!options.publicKeys.some((k) => safeKeyId(k) === signer.keyId)) {
        problem(
          "signer_mismatch",
          `the signing key ${signer.keyId} is not among the trusted public keys: the genesis entry it would sign would not verify`,
        );
      }
    }

    // The state tables against the chain they must be a projection of.
    if (result.ok && options.checkSnapshots !== false) {
      stage = "replaying the chain and checking the snapshots";
      await checkSnapshotTables(substrate, report, {
        pageSize,
        repair: repair && signer !== undefined && report.problems.length === 0 ? signer : null,
        nowNs: clock.nowNs(),
      });
      for (const p of snapshotProblems(report)) problem(p.code, p.message);
    }

    const writable = report.problems.length === 0;
    // The acceptance comes first, so every entry this run writes follows the record of the restore.
    let head: Checkpoint | null =
      result.ok && result.count > 0 ? { count: result.count, head_hash: result.head_hash } : null;
    if (writable && result.ok && rollback !== null && accept !== undefined && signer !== undefined) {
      stage = "recording the accepted rollback";
      head = await recordRollbackAccepted(substrate, rollback, {
        signer,
        operatorId: accept.operatorId,
        nowNs: clock.nowNs(),
      });
      report.chain.rollback = { ...rollback, accepted_seq: head.count - 1 };
      report.actions.push(
        `accepted the rollback to ${rollback.store_head === null ? "an empty chain" : `entry ${rollback.store_head.seq}`} from entry ${rollback.checkpoint.count - 1} (rollback_accepted entry ${head.count - 1}, operator ${accept.operatorId})`,
      );
    }
    // The engines below open the chain from what was just verified, not from the genesis again.
    const verifiedHere = {
      trustedKeys: options.publicKeys,
      ...(head === null ? {} : { trustedCheckpoint: head }),
    };

    // Re-enqueue what a lost enqueue left out; leave DEAD items unless asked.
    if (writable && repair && outbox.missing.length > 0) {
      stage = "re-enqueueing entries missing from the outbox";
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
    if (outbox.dead.length > 0) {
      if (writable && repair && options.requeueDead === true) {
        stage = "requeueing DEAD outbox items";
        // Only the items this run saw DEAD (and lists in outbox.dead); fewer move when another process
        // requeued some of them meanwhile, which leaves nothing DEAD to warn about either.
        report.outbox.requeued = await requeueDead(substrate, {
          seqs: outbox.dead.map((item) => item.seq),
          clock,
        });
        report.actions.push(
          `requeued ${report.outbox.requeued} DEAD outbox items for the relay (attempts reset, last_error kept)`,
        );
      } else {
        const first = outbox.dead[0]!;
        const hint = writable
          ? `; once the sink is fixed, requeue them with repair and requeueDead${options.requeueDead === true ? " (requeueDead needs repair)" : ""}`
          : "";
        report.warnings.push({
          code: "outbox_dead",
          message: `${outbox.dead.length} outbox item(s) are DEAD and will not be relayed (first seq ${first.seq}: ${first.last_error ?? "no error recorded"})${hint}`,
        });
      }
    }
    if (writable && options.leaseOwner !== undefined) {
      stage = "releasing the restarted relay's leases";
      report.outbox.releasedLeases = await releaseLeases(substrate, options.leaseOwner, outbox.items);
      if (report.outbox.releasedLeases > 0) {
        report.actions.push(
          `released ${report.outbox.releasedLeases} outbox leases of ${options.leaseOwner}`,
        );
      }
    }

    // 4a. Budget holds whose agent never reported back.
    stage = "expiring reservations";
    report.reservations.overdue = await substrate.transaction(
      async (tx) => (await tx.budgets.listExpired(clock.nowNs(), Number.MAX_SAFE_INTEGER)).length,
    );
    if (report.reservations.overdue > 0) {
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

    // 4a'. Escrow: Σ allotments + spent ≤ limit and no shard past its allotment; dead shards' allotments return.
    stage = "checking budget allotments";
    report.escrow = await checkAllotments(substrate, { nowNs: clock.nowNs(), reclaim: writable && repair });
    for (const { account_id, violation } of report.escrow.violations) {
      problem("escrow_violation", `budget escrow of ${account_id}: ${describeViolation(violation)}`);
    }
    if (report.escrow.reclaimed.length > 0) {
      report.actions.push(`returned ${report.escrow.reclaimed.length} dead shards' budget allotments`);
    }

    // 4b. HITL requests nobody answered in time: expired, so their agents are told hitl_timeout.
    stage = "expiring HITL requests";
    const hitlNow = clock.nowNs();
    report.hitl.overdue = await substrate.transaction(
      async (tx) =>
        (await tx.hitl.list({ status: "PENDING" })).filter(
          (r) => r.expires_ns !== null && r.expires_ns <= hitlNow,
        ).length,
    );
    if (report.hitl.overdue > 0) {
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

    // 4c. Sessions that stopped heartbeating (spec §4.5).
    stage = "marking stale sessions";
    const staleNs = missed * intervalMs * 1e6;
    const sessionsNow = clock.nowNs();
    const overdue = await findStaleSessions(substrate, sessionsNow, staleNs);
    report.sessions.overdue = overdue.map((s) => s.session_id);
    if (overdue.length > 0) {
      if (writable && signer !== undefined) {
        // Through the engine, which writes the session_stale entry with the state change.
        const engine = createEngine({
          substrate,
          signer,
          clock: { nowNs: () => sessionsNow },
          ...verifiedHere,
        });
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

    // 5. Trust what was verified; never bless a state with a problem in it.
    if (writable && head !== null && options.checkpointStore !== undefined) {
      stage = "writing the checkpoint";
      await options.checkpointStore.write(head);
      report.chain.checkpoint.written = head;
    }
  } catch (error) {
    if (RecoveryError.isInstance(error)) throw error;
    throw new RecoveryError(
      "store_failed",
      `recovery failed while ${stage}: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
  report.ok = report.problems.length === 0;
  report.durationMs = performance.now() - started;
  return report;
}

async function checkSnapshotTables(
  substrate: Substrate,
  report: RecoveryReport,
  options: { pageSize: number; repair: Signer | null; nowNs: number },
): Promise<void> {
  async function* entries() {
    for (let from = 0; ; ) {
      const page = await substrate.transaction((tx) => tx.chain.range(from, options.pageSize));
      yield* page;
      if (page.length < options.pageSize) return;
      from = page[page.length - 1]!.seq + 1;
    }
  }
  const replay = await replayChain(entries(), { params: storedParams(substrate) });
  const s = report.snapshots;
  s.checked = true;
  s.replayed = replay.count;
  s.verdicts_checked = replay.verdicts_checked;
  s.proved_from = replay.proved_from;
  s.replay_mismatch = replay.mismatch;
  if (!replay.ok) return;
  s.differences = await compareSnapshots(substrate, replay.projection);
  if (s.differences.length === 0 || options.repair === null) return;
  const done = await repairSnapshots(substrate, replay, s.differences, options.repair, options.nowNs);
  s.repaired = done.repaired.length;
  s.repair_entry_seq = done.entry_seq;
  report.actions.push(
    `rewrote ${done.repaired.length} snapshot value(s) from the replayed chain (snapshot_repaired entry ${done.entry_seq})`,
  );
  s.differences = done.left;
}

function snapshotProblems(report: RecoveryReport): { code: RecoveryErrorCode; message: string }[] {
  const s = report.snapshots;
  if (s.replay_mismatch !== null) {
    const m = s.replay_mismatch;
    return [
      {
        code: "replay_mismatch",
        message: `entry ${m.index} (seq ${m.seq}${m.session_id === null ? "" : `, session ${m.session_id}`}) does not follow from the entries before it: ${m.message}`,
      },
    ];
  }
  if (s.differences.length === 0) return [];
  return [
    {
      code: "snapshot_mismatch",
      message: `the state tables disagree with the replayed chain: ${describeDifferences(s.differences)}; rebuild them with leash recover --repair`,
    },
  ];
}

function safeKeyId(key: string | Uint8Array): string | null {
  try {
    return keyId(publicKeyBytes(key));
  } catch {
    return null;
  }
}
