// The outbox store on leash_outbox: entries waiting for a relay, leased with FOR UPDATE SKIP LOCKED.
// Delivery, backoff and sinks are @leash/relay's; here only who holds which item, and until when.
import type { OutboxEnqueue, OutboxItem, OutboxStatus, OutboxStore } from "@leash/core";
import { SubstrateError } from "@leash/core";
import {
  decodeInt,
  decodeOptionalInt,
  encodeInt,
  encodeLimit,
  encodeOptionalText,
  encodeText,
} from "./codec.js";
import type { Statements } from "./sql.js";
import type { TxContext } from "./tx.js";

interface OutboxRow {
  seq: unknown;
  entry_id: string;
  session_id: string | null;
  status: string;
  attempts: unknown;
  claimed_by: string | null;
  lease_until_ns: unknown;
  last_error: string | null;
  created_ns: unknown;
}

function fromRow(row: OutboxRow): OutboxItem {
  return {
    seq: decodeInt(row.seq, "seq"),
    entry_id: row.entry_id,
    session_id: row.session_id,
    status: row.status as OutboxStatus,
    attempts: decodeInt(row.attempts, "attempts"),
    claimed_by: row.claimed_by,
    lease_until_ns: decodeOptionalInt(row.lease_until_ns, "lease_until_ns"),
    last_error: row.last_error,
    created_ns: decodeInt(row.created_ns, "created_ns"),
  };
}

function enqueueParams(item: OutboxEnqueue): unknown[] {
  return [
    encodeInt(item.seq, "seq"),
    encodeText(item.entry_id, "entry_id"),
    encodeOptionalText(item.session_id, "session_id"),
    encodeInt(item.created_ns, "created_ns"),
  ];
}

const alreadyQueued = (item: OutboxEnqueue) =>
  new SubstrateError("conflict", `outbox item ${item.seq} is already queued`);

// "Holds the lease" in ack and fail: still PENDING and still claimed by this relay. The lease end is
// not checked (they take no clock): an expired lease no other relay has taken over is still its own.
export class PostgresOutboxStore implements OutboxStore {
  constructor(
    private readonly tx: TxContext,
    private readonly sql: Statements["outbox"],
    /** Whether this transaction appended chain entry `seq` after the head it holds (PostgresChainStore.appendedSeqs). */
    private readonly appended: (seq: number) => boolean = () => false,
  ) {}

  /**
   * The item of an entry this transaction appended after the head it holds is inserted without
   * waiting for the answer (see TxContext.defer): items are queued in the transaction that appends
   * their entry, so none can hold that seq. Should one hold it after all (an item queued without
   * its entry), the transaction fails with "conflict" before it commits, though not at this call.
   */
  async enqueue(item: OutboxEnqueue) {
    const params = enqueueParams(item);
    if (this.appended(item.seq)) return this.enqueueHeld(item, params);
    const { rowCount } = await this.tx.query(this.sql.enqueue, params);
    if (rowCount === 0) throw alreadyQueued(item);
  }

  /**
   * Queues without waiting for the answer (TxContext.defer): the item of an entry this transaction
   * appended (enqueue), or one of SubstrateTx.writeBatch, which waits for every answer before it
   * resolves. A taken seq, checked in the answer, fails the transaction.
   */
  enqueueHeld(item: OutboxEnqueue, params: unknown[] = enqueueParams(item)): Promise<void> {
    return this.tx.defer(this.sql.enqueue, params, (r) => (r.rowCount === 0 ? alreadyQueued(item) : null));
  }

  async claim(options: {
    relayId: string;
    limit: number;
    nowNs: number;
    leaseNs: number;
  }): Promise<OutboxItem[]> {
    encodeInt(options.leaseNs, "leaseNs");
    // Summed as doubles, as in every substrate, so all of them store the same lease end.
    const leaseUntil = encodeInt(options.nowNs + options.leaseNs, "nowNs + leaseNs");
    const { rows } = await this.tx.query<OutboxRow>(this.sql.claim, [
      encodeText(options.relayId, "relayId"),
      leaseUntil,
      encodeInt(options.nowNs, "nowNs"),
      encodeLimit(Math.max(0, options.limit)),
    ]);
    // RETURNING follows no ORDER BY.
    return rows.map(fromRow).sort((a, b) => a.seq - b.seq);
  }

  async ack(relayId: string, seqs: number[]): Promise<number> {
    if (seqs.length === 0) return 0;
    const { rowCount } = await this.tx.query(this.sql.ack, [
      encodeText(relayId, "relayId"),
      seqs.map((seq) => encodeInt(seq, "seq")),
    ]);
    return rowCount ?? 0;
  }

  async fail(
    relayId: string,
    seq: number,
    error: string,
    dead: boolean,
    options?: { unsent?: boolean },
  ): Promise<void> {
    const statement = dead ? this.sql.dead : options?.unsent === true ? this.sql.release : this.sql.retry;
    await this.tx.query(statement, [
      encodeText(relayId, "relayId"),
      encodeInt(seq, "seq"),
      encodeText(error, "error"),
    ]);
  }

  async requeue(options: { seqs?: number[]; all?: boolean; nowNs: number }): Promise<number> {
    const all = options?.all === true;
    if (all === (options?.seqs !== undefined)) {
      throw new TypeError("requeue needs exactly one of all: true and seqs");
    }
    if (!all && !Array.isArray(options.seqs)) throw new TypeError("requeue seqs must be an array");
    // encodeInt spells the exact integer (BigInt digits above 2^53), as the port asks.
    const prefix = `requeued at ${encodeInt(options.nowNs, "nowNs")}: `;
    if (all) return (await this.tx.query(this.sql.requeueAll, [prefix])).rowCount ?? 0;
    const seqs = (options.seqs as number[]).map((seq) => encodeInt(seq, "seq"));
    if (seqs.length === 0) return 0;
    // ANY over an array matches each row once, so a repeated seq is counted once.
    return (await this.tx.query(this.sql.requeueSeqs, [prefix, seqs])).rowCount ?? 0;
  }

  async list(filter: { status?: OutboxStatus; limit?: number }): Promise<OutboxItem[]> {
    const limit = encodeLimit(filter.limit === undefined ? undefined : Math.max(0, filter.limit));
    const { rows } =
      filter.status === undefined
        ? await this.tx.query<OutboxRow>(this.sql.list, [limit])
        : await this.tx.query<OutboxRow>(this.sql.listByStatus, [encodeText(filter.status, "status"), limit]);
    return rows.map(fromRow);
  }

  async counts(): Promise<Record<OutboxStatus, number>> {
    const { rows } = await this.tx.query<{ status: OutboxStatus; count: unknown }>(this.sql.counts, []);
    const counts: Record<OutboxStatus, number> = { PENDING: 0, DELIVERED: 0, DEAD: 0 };
    for (const row of rows) counts[row.status] = decodeInt(row.count, "count");
    return counts;
  }
}
