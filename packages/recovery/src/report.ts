// Turning a recovery report into a decision (assertRecovered) and into text for people (formatReport).
// It finds nothing itself: everything here reads the report recover() returned.
import { RecoveryError } from "./errors.js";
import type { RecoveryReport } from "./recover-report.js";

/**
 * Returns the report when the store may be served, and throws otherwise: a daemon calls this before
 * it listens, so a tampered or unverifiable store is refused rather than written on top of.
 * @throws RecoveryError with the first problem's code; the message lists every problem and says how
 *   to inspect the chain.
 */
export function assertRecovered(report: RecoveryReport): RecoveryReport {
  if (report.ok && report.problems.length === 0) return report;
  const first = report.problems[0];
  const code = first?.code ?? "chain_unverifiable";
  const lines = report.problems.map((p) => `- ${p.code}: ${p.message}`);
  throw new RecoveryError(
    code,
    `refusing to serve: the store failed recovery\n${lines.join("\n")}\ninspect it with: ${report.inspect}`,
  );
}

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** A few lines for a log or a terminal: the verdict first, then what was found and what was done. */
export function formatReport(report: RecoveryReport): string {
  const out: string[] = [];
  const { chain, outbox, reservations, sessions } = report;
  out.push(
    report.ok
      ? `recovery OK in ${report.durationMs.toFixed(0)} ms`
      : `recovery FAILED in ${report.durationMs.toFixed(0)} ms: do not serve from this store`,
  );
  if (chain.verified) {
    const head = chain.head_hash === null ? "empty" : `head ${chain.head_hash}`;
    out.push(`  chain: ${plural(chain.count, "entry", "entries")} verified, ${head}`);
  } else if (chain.failure !== null) {
    const f = chain.failure;
    out.push(
      `  chain: FAILED at entry ${f.index} (seq ${f.seq ?? "unknown"}): ${f.kind}: ${f.message} (${plural(chain.count, "entry", "entries")} verified before it)`,
    );
  }
  const rb = chain.rollback;
  if (rb !== null) {
    const store = rb.store_head === null ? "empty" : `head entry ${rb.store_head.seq}`;
    const accepted =
      rb.accepted_seq === null ? "REFUSED" : `accepted (rollback_accepted entry ${rb.accepted_seq})`;
    out.push(
      `  rollback: the store (${store}) is ${rb.kind === "behind" ? "behind" : "forked from"} the checkpoint (entry ${rb.checkpoint.count - 1} ${rb.checkpoint.head_hash}): ${accepted}`,
    );
  }
  const cp = chain.checkpoint;
  if (cp.location !== null) {
    const before = cp.previous === null ? "none" : `${cp.previous.count} entries`;
    const after = cp.written === null ? "not written" : `now ${cp.written.count} entries`;
    out.push(`  checkpoint ${cp.location}: was ${before}, ${after}`);
  }
  const snap = report.snapshots;
  if (snap.checked) {
    const proved =
      snap.proved_from === 0
        ? "every verdict re-derived"
        : `verdicts re-derived from entry ${snap.proved_from}`;
    const state =
      snap.replay_mismatch !== null
        ? `FAILED at entry ${snap.replay_mismatch.index}`
        : snap.differences.length === 0
          ? "state tables agree"
          : `${plural(snap.differences.length, "state value")} differ`;
    out.push(`  replay: ${plural(snap.replayed, "entry", "entries")}, ${proved}; ${state}`);
    for (const d of snap.differences.slice(0, 5)) {
      out.push(
        `    ${d.table} ${d.id} ${d.field}: store ${JSON.stringify(d.snapshot)}, chain ${JSON.stringify(d.replayed)}`,
      );
    }
  }
  const c = outbox.counts;
  const leases = Object.entries(outbox.liveLeases)
    .map(([holder, n]) => `${holder}: ${n}`)
    .join(", ");
  out.push(
    `  outbox: ${c.PENDING} pending, ${c.DELIVERED} delivered, ${c.DEAD} dead; ` +
      `${plural(outbox.expiredLeases, "expired lease")}${leases === "" ? "" : `, live leases (${leases})`}`,
  );
  out.push(
    `  reservations: ${reservations.overdue} past their TTL, ${reservations.expired} charged at their estimate; ` +
      `sessions: ${sessions.overdue.length} missed heartbeats, ${sessions.markedStale.length} marked STALE`,
  );
  out.push(`  hitl: ${report.hitl.overdue} past their expiry, ${report.hitl.expired} expired`);
  const escrow = report.escrow;
  if (escrow !== undefined && escrow.allotments > 0) {
    out.push(
      `  escrow: ${plural(escrow.allotments, "allotment")} on ${plural(escrow.accounts, "account")}, ` +
        `${escrow.violations.length} broken invariants, ${escrow.reclaimed.length} returned, ` +
        `${escrow.heldBack.length} waiting on open holds`,
    );
  }
  for (const p of report.problems) out.push(`  ERROR ${p.code}: ${p.message}`);
  for (const w of report.warnings) out.push(`  warning ${w.code}: ${w.message}`);
  for (const a of report.actions) out.push(`  done: ${a}`);
  if (!report.ok) out.push(`  inspect with: ${report.inspect}`);
  return `${out.join("\n")}\n`;
}
