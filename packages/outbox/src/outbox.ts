// Typed helpers over the OutboxStore port, so the engine and relays never hand-roll the outbox protocol.
// No delivery, retry policy or backoff here (that is @leash/relay), and no storage (the substrates).

import type { ChainEntryRecord, Clock, OutboxItem, OutboxStatus, Substrate, SubstrateTx } from "@leash/core";
import { OutboxError } from "./errors.js";

/** What the outbox keeps of a chain entry: enough to find it again and to order it per session. */
export type EnqueueableEntry = Pick<ChainEntryRecord, "seq" | "entry_id" | "session_id" | "created_ns">;

/**
 * Queues `entry` for the relays. MUST be called inside the transaction that appends the entry
 * (`tx.chain.append`): the two commit or roll back together, so an entry is never shipped that was
 * not committed, and never committed without being shipped (the transactional outbox).
 * Fails with SubstrateError "conflict" when the seq is queued already. `newSeq`: the caller has
 * just appended this entry in `tx` (see OutboxStore.enqueue); a store may then not wait for the answer.
 */
export function enqueueEntry(
  tx: SubstrateTx,
  entry: EnqueueableEntry,
  options?: { newSeq?: boolean },
): Promise<void> {
  // Only the four columns: passing the whole record would hand the store fields it must not keep.
  return tx.outbox.enqueue(
    {
      seq: entry.seq,
      entry_id: entry.entry_id,
      session_id: entry.session_id,
      created_ns: entry.created_ns,
    },
    options,
  );
}

export interface ClaimBatchOptions {
  /** Who holds the leases; unique per running relay (a restarted relay is a new holder). */
  relayId: string;
  /** Most items to lease. */
  limit: number;
  /** How long the leases last. A relay that has not settled an item by then may lose it to another. */
  leaseMs: number;
  clock: Clock;
}

/** A claimed item given back at once because an older item of its session is still PENDING elsewhere. */
export interface DeferredItem {
  seq: number;
  session_id: string | null;
  /** The older item it waits for, and who held it when the claim ran (null: released, not yet reclaimed). */
  behind: { seq: number; claimed_by: string | null };
}

/** A leased batch. `entries[i]` is the chain entry of `items[i]`; both are in ascending seq order. */
export interface ClaimedBatch {
  readonly relayId: string;
  readonly items: readonly OutboxItem[];
  readonly entries: readonly ChainEntryRecord[];
  /**
   * Items the claim leased but released again in the same transaction (PENDING, free, last_error
   * saying why): their session has an older item still PENDING outside this batch, usually leased by
   * another relay, and delivering them first would break the session's order. The relay holding the
   * older item, or whoever claims next, takes them in order. Their `attempts` still went up by one:
   * the port counts leases, and offers no way to take one back.
   */
  readonly deferred: readonly DeferredItem[];
  /** The clock reading the leases were taken at, and when they end (epoch nanoseconds). */
  readonly claimedNs: number;
  readonly leaseUntilNs: number;
}

const NS_PER_MS = 1_000_000;
/** Longest last_error kept: a sink's error text (an HTTP body, say) can be arbitrarily long. */
const MAX_ERROR_CHARS = 2000;

function checkRelayId(relayId: string): string {
  if (typeof relayId !== "string" || relayId.trim() === "") {
    throw new OutboxError(
      "invalid_input",
      `relayId must be a non-empty string, got ${JSON.stringify(relayId)}`,
    );
  }
  return relayId;
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new OutboxError("invalid_input", `${name} must be a positive integer, got ${String(value)}`);
  }
  return value;
}

function leaseNsOf(leaseMs: number): number {
  if (typeof leaseMs !== "number" || !Number.isFinite(leaseMs) || leaseMs <= 0) {
    throw new OutboxError("invalid_input", `leaseMs must be a positive number, got ${String(leaseMs)}`);
  }
  // At least 1 ns: a zero lease would be expired the moment it was taken.
  return Math.max(1, Math.round(leaseMs * NS_PER_MS));
}

function errorText(error: string): string {
  const text = typeof error === "string" && error.trim() !== "" ? error : "unknown error";
  return text.length <= MAX_ERROR_CHARS ? text : `${text.slice(0, MAX_ERROR_CHARS - 1)}…`;
}

/**
 * Leases up to `limit` PENDING items (lowest seq first) to `relayId` and loads their chain entries in
 * the same transaction, so a claimed item always comes with its entry: no relay can see an item
 * whose entry it then fails to find. Items that would overtake an older item of their session held
 * elsewhere are released at once and listed in `deferred`, so delivering `items` in order keeps every
 * session's order even with several relays. An empty `items` means nothing can be delivered now.
 * @throws OutboxError "corrupt" (and claims nothing) when an item's entry is missing or differs.
 */
export async function claimBatch(substrate: Substrate, options: ClaimBatchOptions): Promise<ClaimedBatch> {
  const relayId = checkRelayId(options.relayId);
  const limit = positiveInteger("limit", options.limit);
  const leaseNs = leaseNsOf(options.leaseMs);
  const nowNs = options.clock.nowNs();
  return substrate.transaction(async (tx) => {
    const claimed = await tx.outbox.claim({ relayId, limit, nowNs, leaseNs });
    const older = await olderPendingBySession(tx, claimed);
    const items: OutboxItem[] = [];
    const deferred: DeferredItem[] = [];
    for (const item of claimed) {
      const behind = older.get(item.session_id);
      if (behind === undefined || item.seq < behind.seq) {
        items.push(item);
        continue;
      }
      const holder = behind.claimed_by === null ? "" : ` (leased by ${behind.claimed_by})`;
      await tx.outbox.fail(relayId, item.seq, `waiting for seq ${behind.seq} of its session${holder}`, false);
      deferred.push({ seq: item.seq, session_id: item.session_id, behind });
    }
    const entries = await entriesOf(tx, items);
    return { relayId, items, entries, deferred, claimedNs: nowNs, leaseUntilNs: nowNs + leaseNs };
  });
}

/** One range read per run of consecutive seqs: a claim is usually one run, so usually one read. */
async function entriesOf(tx: SubstrateTx, items: readonly OutboxItem[]): Promise<ChainEntryRecord[]> {
  const entries: ChainEntryRecord[] = [];
  let start = 0;
  while (start < items.length) {
    let end = start;
    while (end + 1 < items.length && items[end + 1]!.seq === items[end]!.seq + 1) end++;
    const run = await tx.chain.range(items[start]!.seq, end - start + 1);
    for (let i = start; i <= end; i++) {
      const item = items[i]!;
      const entry = run[i - start];
      if (entry === undefined || entry.seq !== item.seq) {
        throw new OutboxError("corrupt", `outbox item ${item.seq} has no chain entry`);
      }
      if (entry.entry_id !== item.entry_id) {
        throw new OutboxError(
          "corrupt",
          `outbox item ${item.seq} names entry ${JSON.stringify(item.entry_id)} but the chain holds ${JSON.stringify(entry.entry_id)} there`,
        );
      }
      entries.push(entry);
    }
    start = end + 1;
  }
  return entries;
}

/**
 * For each session in the batch, its lowest PENDING item that is below one of the batch's own items
 * but not in the batch. The store lists PENDING items from the lowest seq up, and a claim takes the
 * lowest free ones, so the items below the batch's highest seq are usually just the batch itself
 * plus what other relays hold: the first page nearly always suffices.
 */
async function olderPendingBySession(
  tx: SubstrateTx,
  items: readonly OutboxItem[],
): Promise<Map<string | null, { seq: number; claimed_by: string | null }>> {
  const older = new Map<string | null, { seq: number; claimed_by: string | null }>();
  if (items.length === 0) return older;
  const mine = new Set(items.map((item) => item.seq));
  const highestBySession = new Map<string | null, number>();
  for (const item of items) highestBySession.set(item.session_id, item.seq);
  const highest = items[items.length - 1]!.seq;
  let limit = items.length + 32;
  for (;;) {
    const pending = await tx.outbox.list({ status: "PENDING", limit });
    for (const other of pending) {
      if (other.seq >= highest) break;
      if (mine.has(other.seq) || older.has(other.session_id)) continue;
      const top = highestBySession.get(other.session_id);
      if (top !== undefined && other.seq < top) {
        older.set(other.session_id, { seq: other.seq, claimed_by: other.claimed_by });
      }
    }
    const last = pending[pending.length - 1];
    if (pending.length < limit || last === undefined || last.seq >= highest) return older;
    limit *= 4;
  }
}

/**
 * Marks the items DELIVERED where `relayId` still holds them; returns how many. Fewer than asked
 * means another relay took some over after their lease expired: it will deliver them again, which
 * an idempotent sink turns into a no-op.
 */
export function ackBatch(substrate: Substrate, relayId: string, seqs: readonly number[]): Promise<number> {
  checkRelayId(relayId);
  if (seqs.length === 0) return Promise.resolve(0);
  return substrate.transaction((tx) => tx.outbox.ack(relayId, [...seqs]));
}

/**
 * Gives a leased item back: PENDING and free at once (`dead: false`; backoff is the caller's to
 * apply), or DEAD for good with `error` kept as the reason. A no-op where `relayId` no longer holds it.
 */
export function failItem(
  substrate: Substrate,
  relayId: string,
  seq: number,
  options: { error: string; dead: boolean },
): Promise<void> {
  checkRelayId(relayId);
  return substrate.transaction((tx) => tx.outbox.fail(relayId, seq, errorText(options.error), options.dead));
}

/** The outcome of one delivery round, settled in one transaction by settleBatch. */
export interface Settlement {
  delivered: readonly number[];
  /** Back to PENDING, free to claim again; `error` becomes last_error. */
  retry: readonly { seq: number; error: string }[];
  /** DEAD, with `error` as the reason. */
  dead: readonly { seq: number; error: string }[];
}

/**
 * ackBatch and failItem for a whole round in one transaction: one commit (and one fsync) per round
 * instead of one per item. Returns how many deliveries were acknowledged (see ackBatch).
 */
export function settleBatch(
  substrate: Substrate,
  relayId: string,
  settlement: Settlement,
): Promise<{ acked: number }> {
  checkRelayId(relayId);
  const { delivered, retry, dead } = settlement;
  if (delivered.length === 0 && retry.length === 0 && dead.length === 0) return Promise.resolve({ acked: 0 });
  return substrate.transaction(async (tx) => {
    const acked = delivered.length === 0 ? 0 : await tx.outbox.ack(relayId, [...delivered]);
    for (const { seq, error } of retry) await tx.outbox.fail(relayId, seq, errorText(error), false);
    for (const { seq, error } of dead) await tx.outbox.fail(relayId, seq, errorText(error), true);
    return { acked };
  });
}

export interface RequeueDeadOptions {
  /** Requeue these seqs, those of them that are DEAD (others are left alone). Give this or `all`. */
  seqs?: readonly number[];
  /** Requeue every DEAD item. Give this or `seqs`. */
  all?: boolean;
  /** Stamps the requeue into each item's last_error (default systemClock). */
  clock?: Clock;
}

/**
 * Moves DEAD items back to PENDING in one transaction, for an operator who fixed what made them fail
 * (a webhook's secret, say): attempts start again from 0, no relay holds them, and last_error keeps
 * why they died behind `requeued at <ns>: `. PENDING and DELIVERED items are never touched, so asking
 * twice, or for a seq that is not DEAD, moves nothing more. Returns how many moved.
 * A requeued entry reaches the sink after whatever later entries of its session were delivered while
 * it was DEAD; from then on its session's younger PENDING items wait behind it again (claimBatch).
 * @throws OutboxError "invalid_input" (and changes nothing) unless exactly one of `all: true` and
 *   `seqs` is given, and every seq is a non-negative integer.
 */
export async function requeueDead(substrate: Substrate, options: RequeueDeadOptions): Promise<number> {
  const all = options?.all === true;
  const given = options?.seqs;
  if (all === (given !== undefined)) {
    throw new OutboxError("invalid_input", "requeueDead needs exactly one of all: true and seqs");
  }
  let seqs: number[] | undefined;
  if (given !== undefined) {
    if (!Array.isArray(given)) throw new OutboxError("invalid_input", "seqs must be an array of seqs");
    for (const seq of given) {
      if (!Number.isSafeInteger(seq) || seq < 0) {
        throw new OutboxError("invalid_input", `seqs must be non-negative integers, got ${String(seq)}`);
      }
    }
    // Nothing to move: no transaction (and, on SQLite, no write lock) for it.
    if (given.length === 0) return 0;
    seqs = [...given];
  }
  const nowNs = (options.clock ?? systemClock).nowNs();
  return substrate.transaction((tx) =>
    tx.outbox.requeue(seqs === undefined ? { all: true, nowNs } : { seqs, nowNs }),
  );
}

export interface OutboxStats {
  counts: Record<OutboxStatus, number>;
  /** The oldest PENDING item (lowest seq), or null when nothing waits. */
  oldestPending: { seq: number; created_ns: number } | null;
  /** How long the oldest PENDING item has waited, by the given clock; null without a clock or pending item. */
  oldestPendingAgeMs: number | null;
}

/** Backlog and outcome counts: `counts.PENDING` and `oldestPendingAgeMs` are the relay lag. */
export async function outboxStats(
  substrate: Substrate,
  options: { clock?: Clock } = {},
): Promise<OutboxStats> {
  const { counts, oldest } = await substrate.transaction(async (tx) => ({
    counts: await tx.outbox.counts(),
    oldest: (await tx.outbox.list({ status: "PENDING", limit: 1 }))[0],
  }));
  const oldestPending = oldest === undefined ? null : { seq: oldest.seq, created_ns: oldest.created_ns };
  const oldestPendingAgeMs =
    oldestPending === null || options.clock === undefined
      ? null
      : Math.max(0, (options.clock.nowNs() - oldestPending.created_ns) / NS_PER_MS);
  return { counts, oldestPending, oldestPendingAgeMs };
}

let lastNs = 0;
/**
 * Epoch nanoseconds that never go backwards within the process, the default clock of claimBatch's
 * callers. Microsecond resolution is plenty for leases, and keeps values integral above 2^53.
 */
export const systemClock: Clock = {
  nowNs: () => {
    lastNs = Math.max(lastNs, Math.round((performance.timeOrigin + performance.now()) * 1000) * 1000);
    return lastNs;
  },
};
