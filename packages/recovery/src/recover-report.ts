// What recover() takes and reports: its options, the report's shape (problems, warnings, actions and each
// check's figures) and the empty report a run starts from. No checking: recover.ts and recover-steps.ts do.
import type { ChainFailure, Checkpoint, Signer } from "@leash/chain";
import type { Clock, OutboxStatus } from "@leash/core";
import type { RollbackFinding } from "@leash/engine";
import type { CheckpointStore } from "./checkpoint.js";
import type { RecoveryErrorCode } from "./errors.js";
import type { EscrowCheck } from "./escrow-check.js";
import type { ReplayMismatch } from "./replay/replay.js";
import type { SnapshotDifference } from "./snapshot-check.js";

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

/** The report of a run that has found nothing yet (and verified nothing). */
export function emptyReport(options: RecoverOptions, startedNs: number, inspect: string): RecoveryReport {
  return {
    ok: true,
    problems: [],
    warnings: [],
    actions: [],
    startedNs,
    durationMs: 0,
    inspect,
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
}
