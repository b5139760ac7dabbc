// The SQLite OutboxStore: a transaction's queue of chain entries for the relay, with leases.
// It runs inside a transaction the substrate opened (stores.ts's SqliteTx); it never BEGINs or COMMITs.

import type { OutboxItem, OutboxStatus, OutboxStore } from "@leash/core";
import { SubstrateError } from "@leash/core";
import { checkedInteger, type OutboxRow, optionalText, rowToOutbox, text } from "./codec.js";
import { DECISION_SQL } from "./decision-sql.js";
import { limitOf } from "./store-util.js";
import type { SqliteTx } from "./stores.js";

// "Holds the lease" everywhere below: still PENDING and still claimed by this relay. The lease end
// is not checked there (ack and fail take no clock); a lease that expired but that no other relay
// has taken over is still the relay's to settle.
export class Outbox implements OutboxStore {
  constructor(readonly tx: SqliteTx) {}

  async enqueue(item: { seq: number; entry_id: string; session_id: string | null; created_ns: number }) {
    const seq = checkedInteger("seq", item.seq);
    const entryId = text("entry_id", item.entry_id);
    const sessionId = optionalText("session_id", item.session_id);
    const createdNs = checkedInteger("created_ns", item.created_ns);
    const { changes } = this.tx.exec("outbox.enqueue", (st) =>
      st(DECISION_SQL.outboxInsert).run(seq, entryId, sessionId, createdNs),
    );
    if (changes === 0) throw new SubstrateError("conflict", `outbox item ${seq} is already queued`);
  }

  async claim(options: {
    relayId: string;
    limit: number;
    nowNs: number;
    leaseNs: number;
  }): Promise<OutboxItem[]> {
    const relayId = text("relayId", options.relayId);
    const now = checkedInteger("nowNs", options.nowNs);
    // Summed as doubles, as in every substrate, so all of them store the same lease end.
    const leaseUntil = checkedInteger(
      "nowNs + leaseNs",
      options.nowNs + checkedInteger("leaseNs", options.leaseNs),
    );
    const max = limitOf(options.limit);
    // Holding the write lock, no other relay can claim between the SELECT and the UPDATE.
    const rows = this.tx.exec("outbox.claim", (st) =>
      st(
        `UPDATE leash_outbox SET claimed_by = ?, lease_until_ns = ?, attempts = attempts + 1
         WHERE seq IN (
           SELECT seq FROM leash_outbox
           WHERE status = 'PENDING' AND (lease_until_ns IS NULL OR lease_until_ns <= ?)
           ORDER BY seq LIMIT ?)
         RETURNING *`,
      ).all(relayId, leaseUntil, now, max),
    ) as OutboxRow[];
    // RETURNING gives no order guarantee.
    return rows.map(rowToOutbox).sort((a, b) => a.seq - b.seq);
  }

  async ack(relayId: string, seqs: number[]): Promise<number> {
    const relay = text("relayId", relayId);
    const distinct = [...new Set(seqs.map((seq) => checkedInteger("seq", seq)))];
    // One cached single-row UPDATE per seq: in-process, that costs less than building an IN list, and
    // binding each seq as a number avoids JSON text, whose digits above 2^53 need not equal the double.
    return this.tx.exec("outbox.ack", (st) => {
      const update = st(
        `UPDATE leash_outbox SET status = 'DELIVERED', lease_until_ns = NULL
         WHERE seq = ? AND status = 'PENDING' AND claimed_by = ?`,
      );
      let acked = 0;
      for (const seq of distinct) acked += update.run(seq, relay).changes;
      return acked;
    });
  }

  async fail(
    relayId: string,
    seq: number,
    error: string,
    dead: boolean,
    options?: { unsent?: boolean },
  ): Promise<void> {
    const relay = text("relayId", relayId);
    const at = checkedInteger("seq", seq);
    const reason = text("error", error);
    this.tx.exec("outbox.fail", (st) =>
      (dead
        ? st(
            `UPDATE leash_outbox SET status = 'DEAD', lease_until_ns = NULL, last_error = ?
             WHERE seq = ? AND status = 'PENDING' AND claimed_by = ?`,
          )
        : options?.unsent === true
          ? // Given back untried: the claim's attempt is taken back (OutboxStore.fail, `unsent`).
            st(
              `UPDATE leash_outbox SET claimed_by = NULL, lease_until_ns = NULL, last_error = ?,
               attempts = max(attempts - 1, 0)
               WHERE seq = ? AND status = 'PENDING' AND claimed_by = ?`,
            )
          : // Released at once: backoff is the relay's to decide, not the store's.
            st(
              `UPDATE leash_outbox SET claimed_by = NULL, lease_until_ns = NULL, last_error = ?
               WHERE seq = ? AND status = 'PENDING' AND claimed_by = ?`,
            )
      ).run(reason, at, relay),
    );
  }

  async requeue(options: { seqs?: number[]; all?: boolean; nowNs: number }): Promise<number> {
    const all = options?.all === true;
    if (all === (options?.seqs !== undefined)) {
      throw new TypeError("requeue needs exactly one of all: true and seqs");
    }
    if (!all && !Array.isArray(options.seqs)) throw new TypeError("requeue seqs must be an array");
    // Built here, bound as text: a bound JS number is a REAL to SQLite, which prints 5 as 5.0 and 2^60
    // as 1.152921504606847e+18.
    const prefix = `requeued at ${BigInt(checkedInteger("nowNs", options.nowNs)).toString()}: `;
    const distinct = all
      ? []
      : [...new Set((options.seqs as number[]).map((seq) => checkedInteger("seq", seq)))];
    const moved = `status = 'PENDING', attempts = 0, claimed_by = NULL, lease_until_ns = NULL,
           last_error = ? || coalesce(last_error, '${NO_ERROR_RECORDED}')`;
    return this.tx.exec("outbox.requeue", (st) => {
      if (all) return st(`UPDATE leash_outbox SET ${moved} WHERE status = 'DEAD'`).run(prefix).changes;
      // One cached single-row UPDATE per seq, as in ack.
      const update = st(`UPDATE leash_outbox SET ${moved} WHERE seq = ? AND status = 'DEAD'`);
      let requeued = 0;
      for (const seq of distinct) requeued += update.run(prefix, seq).changes;
      return requeued;
    });
  }

  async list(filter: { status?: OutboxStatus; limit?: number }): Promise<OutboxItem[]> {
    const max = limitOf(filter.limit);
    const rows = this.tx.exec("outbox.list", (st) =>
      filter.status === undefined
        ? st("SELECT * FROM leash_outbox ORDER BY seq LIMIT ?").all(max)
        : st("SELECT * FROM leash_outbox WHERE status = ? ORDER BY seq LIMIT ?").all(filter.status, max),
    ) as OutboxRow[];
    return rows.map(rowToOutbox);
  }

  async counts(): Promise<Record<OutboxStatus, number>> {
    const rows = this.tx.exec("outbox.counts", (st) =>
      st("SELECT status, COUNT(*) AS n FROM leash_outbox GROUP BY status").all(),
    ) as Array<{ status: OutboxStatus; n: number }>;
    const counts: Record<OutboxStatus, number> = { PENDING: 0, DELIVERED: 0, DEAD: 0 };
    for (const { status, n } of rows) counts[status] = n;
    return counts;
  }
}

/** Stands in for a requeued item's reason when it died without one (the OutboxStore port's wording). */
const NO_ERROR_RECORDED = "no error recorded";
