// recover(): what a Leash process runs at every start, before it serves — verify, reconcile, expire, mark.
// It never rewrites a verified entry and never writes on top of a chain that failed: it reports instead.
import { publicKeyBytes, type Signer } from "@leash/chain";
import type { Substrate } from "@leash/core";
import { systemClock } from "@leash/engine";
import { RecoveryError, type RecoveryErrorCode } from "./errors.js";
import { emptyReport, type RecoverOptions, type RecoveryReport } from "./recover-report.js";
import {
  acceptedHead,
  addProblem,
  checkEscrow,
  checkRollback,
  checkSignerInForce,
  checkStoreOutbox,
  expireHitl,
  expireReservations,
  markStaleSessions,
  type RecoverRun,
  readCheckpoint,
  repairOutbox,
  verifyStoreChain,
} from "./recover-steps.js";
import { replayChain, storedParams } from "./replay/replay-chain.js";
import { compareSnapshots, describeDifferences, repairSnapshots } from "./snapshot-check.js";

export type {
  RecoverOptions,
  RecoveryProblem,
  RecoveryReport,
  RecoveryWarning,
  RecoveryWarningCode,
} from "./recover-report.js";

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
  const { clock, intervalMs, missed, pageSize, parallel, repair, signer } = checkedOptions(options);
  const startedNs = clock.nowNs();
  const started = performance.now();
  const report = emptyReport(options, startedNs, inspectHint(options));
  const run: RecoverRun = { substrate, options, clock, report, signer, stage: "reading the checkpoint" };
  try {
    // 1. The checkpoint, then the chain against it.
    const { rollback, checkpoint } = await checkRollback(run, await readCheckpoint(run));
    const scan = await verifyStoreChain(run, checkpoint, { pageSize, parallel });
    const { result } = scan;
    const outbox = await checkStoreOutbox(run, scan);
    checkSignerInForce(run, scan);

    // The state tables against the chain they must be a projection of.
    if (result.ok && options.checkSnapshots !== false) {
      run.stage = "replaying the chain and checking the snapshots";
      await checkSnapshotTables(substrate, report, {
        pageSize,
        repair: repair && signer !== undefined && report.problems.length === 0 ? signer : null,
        nowNs: clock.nowNs(),
      });
      for (const p of snapshotProblems(report)) addProblem(report, p.code, p.message);
    }

    const writable = report.problems.length === 0;
    // The acceptance comes first, so every entry this run writes follows the record of the restore.
    const head = await acceptedHead(run, scan, rollback, writable);
    // The engines below open the chain from what was just verified, not from the genesis again.
    const verifiedHere = {
      trustedKeys: options.publicKeys,
      ...(head === null ? {} : { trustedCheckpoint: head }),
    };
    await repairOutbox(run, outbox, scan, { writable, repair });
    await expireReservations(run, writable, verifiedHere);
    await checkEscrow(run, writable && repair);
    await expireHitl(run, writable, verifiedHere);
    await markStaleSessions(run, writable, verifiedHere, { intervalMs, missed });

    // 5. Trust what was verified; never bless a state with a problem in it.
    if (writable && head !== null && options.checkpointStore !== undefined) {
      run.stage = "writing the checkpoint";
      await options.checkpointStore.write(head);
      report.chain.checkpoint.written = head;
    }
  } catch (error) {
    if (RecoveryError.isInstance(error)) throw error;
    throw new RecoveryError(
      "store_failed",
      `recovery failed while ${run.stage}: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
  report.ok = report.problems.length === 0;
  report.durationMs = performance.now() - started;
  return report;
}

/** The options checked (a bad one is a RecoveryError invalid_argument) and their defaults resolved. */
function checkedOptions(options: RecoverOptions) {
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
  return { clock, intervalMs, missed, pageSize, parallel, repair, signer };
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
