// Typed helpers over the OutboxStore port, so the engine and relays never hand-roll the outbox protocol.
// No delivery, retry policy or backoff here (that is @leash/relay), and no storage (the substrates).

import type {
  ChainEntryRecord,
  Clock,
  OutboxEnqueue,
  OutboxItem,
  OutboxStatus,
  Substrate,
  SubstrateTx,
} from "@leash/core";
import { OutboxError } from "./errors.js";

/** What the outbox keeps of a chain entry: enough to find it again and to order it per session. */
export type EnqueueableEntry = Pick<ChainEntryRecord, "seq" | "entry_id" | "session_id" | "created_ns">;

/**
 * Queues `entry` for the relays. MUST be called inside the transaction that appends the entry
 * (`tx.chain.append`): the two commit or roll back together, so an entry is never shipped that was
 * not committed, and never committed without being shipped (the transactional outbox).
 * Fails with SubstrateError "conflict" when the seq is queued already.
 */
export function enqueueEntry(tx: SubstrateTx, entry: EnqueueableEntry): Promise<void> {
  return tx.outbox.enqueue(outboxItemOf(entry));
}

/** The item `enqueueEntry` queues for `entry`, for a caller that holds its writes and sends them later. */
export function outboxItemOf(entry: EnqueueableEntry): OutboxEnqueue {
  // Only the four columns: passing the whole record would hand the store fields it must not keep.
  return {
    seq: entry.seq,
    entry_id: entry.entry_id,
    session_id: entry.session_id,
    created_ns: entry.created_ns,
  };
}

export interface ClaimBatchOptions {
  /** Who holds the leases; unique per running relay (a restarted relay is a new holder). */
  relayId: string;
  /** Most items to lease. */
  limit: number;
  /** How long the leases last. A relay that has not settled an item by then may lose it to another. */
  leaseMs: number;
  clock: Clock;
  /**
   * Sessions the caller holds back this round (a relay's per-session backoff): their items are
   * passed over and released untried, like those of a blocked session. Absent: none.
   */
  skipSession?: (sessionId: string | null) => boolean;
}

/** A claimed item given back at once, untried, because an older item of its session is in the way. */
export interface DeferredItem {
  seq: number;
  session_id: string | null;
  /**
   * The older item it waits for: PENDING and held elsewhere when the claim ran (`claimed_by`; null:
   * released, not yet reclaimed), or DEAD (`dead`: it waits until an operator requeues that one).
   * null: nothing older is in the way; the caller held the session back (`skipSession`).
   */
  behind: { seq: number; claimed_by: string | null; dead: boolean } | null;
}

/** A leased batch. `entries[i]` is the chain entry of `items[i]`; both are in ascending seq order. */
export interface ClaimedBatch {
  readonly relayId: string;
  readonly items: readonly OutboxItem[];
  readonly entries: readonly ChainEntryRecord[];
  /**
   * Items the claim leased but released again in the same transaction (PENDING, free, last_error
   * saying why, the lease's attempt taken back): their session has an older item that is DEAD, or
   * still PENDING outside this batch (usually leased by another relay), and delivering them first
   * would break the session's order. The relay holding the older item, or whoever claims after the
   * DEAD one is requeued, takes them in order.
   */
  readonly deferred: readonly DeferredItem[];
  /** The clock reading the leases were taken at, and when they end (epoch nanoseconds). */
  readonly claimedNs: number;
  readonly leaseUntilNs: number;
}

const NS_PER_MS = 1_000_000;
/** Longest last_error kept: a sink's error text (an HTTP body, say) can be arbitrarily long. */
const MAX_ERROR_CHARS = 2000;
/**
 * How many items one claim may lease in all, as a multiple of `limit`, while it passes over blocked
 * sessions' items in search of deliverable ones. Bounded so that a session stuck behind a DEAD item
 * with a long backlog costs each round a bounded amount of work; past it, the round takes what it found.
 */
const SCAN_FACTOR = 10;

function checkRelayId(relayId: string): string {
  if (typeof relayId !== "string" || relayId.trim() === "") {
    throw new OutboxError(
      "invalid_argument",
      `relayId must be a non-empty string, got ${JSON.stringify(relayId)}`,
    );
  }
  return relayId;
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new OutboxError("invalid_argument", `${name} must be a positive integer, got ${String(value)}`);
  }
  return value;
}

function leaseNsOf(leaseMs: number): number {
  if (typeof leaseMs !== "number" || !Number.isFinite(leaseMs) || leaseMs <= 0) {
    throw new OutboxError("invalid_argument", `leaseMs must be a positive number, got ${String(leaseMs)}`);
  }
  // At least 1 ns: a zero lease would be expired the moment it was taken.
  return Math.max(1, Math.round(leaseMs * NS_PER_MS));
}

function errorText(error: string): string {
  const text = typeof error === "string" && error.trim() !== "" ? error : "unknown error";
  return text.length <= MAX_ERROR_CHARS ? text : `${text.slice(0, MAX_ERROR_CHARS - 1)}…`;
}

type Blocker = NonNullable<DeferredItem["behind"]>;

function waitingText(behind: Blocker | null): string {
  if (behind === null) return "held back: its session is backing off after a failure";
  if (behind.dead) return `waiting for seq ${behind.seq} of its session, which is DEAD (requeue it to go on)`;
  const holder = behind.claimed_by === null ? "" : ` (leased by ${behind.claimed_by})`;
  return `waiting for seq ${behind.seq} of its session${holder}`;
}

/**
 * Leases up to `limit` PENDING items (lowest seq first) to `relayId` and loads their chain entries in
 * the same transaction, so a claimed item always comes with its entry: no relay can see an item
 * whose entry it then fails to find. Items that would overtake an older item of their session —
 * one held elsewhere, or one that is DEAD — are passed over and released untried (their attempt
 * given back), listed in `deferred`; the claim then leases further items, so one blocked session
 * does not starve the others (up to SCAN_FACTOR × limit items looked at). Delivering `items` in
 * order keeps every session's order, with several relays too. An empty `items` means nothing can
 * be delivered now.
 * @throws OutboxError "corrupt" (and claims nothing) when an item's entry is missing or differs.
 */
export async function claimBatch(substrate: Substrate, options: ClaimBatchOptions): Promise<ClaimedBatch> {
  const relayId = checkRelayId(options.relayId);
  const limit = positiveInteger("limit", options.limit);
  const leaseNs = leaseNsOf(options.leaseMs);
  const nowNs = options.clock.nowNs();
  return substrate.transaction(async (tx) => {
    // Every item leased so far, in seq order. The passed-over ones stay leased until the end, so the
    // next claim() skips them; a concurrent release elsewhere (PostgreSQL) may still hand a lower seq
    // to a later pass, which is why each pass judges the whole set again.
    let leased: OutboxItem[] = [];
    let plan = { items: [] as OutboxItem[], deferred: [] as DeferredItem[] };
    for (;;) {
      const want = limit - plan.items.length;
      const room = SCAN_FACTOR * limit - leased.length;
      const claimed = await tx.outbox.claim({ relayId, limit: Math.min(want, room), nowNs, leaseNs });
      leased = [...leased, ...claimed].sort((a, b) => a.seq - b.seq);
      plan = judge(leased, await blockersBySession(tx, leased), options.skipSession);
      const exhausted = claimed.length < Math.min(want, room);
      if (exhausted || plan.items.length >= limit || leased.length >= SCAN_FACTOR * limit) break;
    }
    // A later pass may have made more deliverable than asked for: the youngest go back, untried.
    const surplus = plan.items.splice(limit);
    for (const item of surplus) {
      await tx.outbox.fail(relayId, item.seq, "released: the batch was full", false, { unsent: true });
    }
    for (const item of plan.deferred) {
      await tx.outbox.fail(relayId, item.seq, waitingText(item.behind), false, { unsent: true });
    }
    const entries = await entriesOf(tx, plan.items);
    return {
      relayId,
      items: plan.items,
      entries,
      deferred: plan.deferred,
      claimedNs: nowNs,
      leaseUntilNs: nowNs + leaseNs,
    };
  });
}

/** Splits leased items (seq order) into deliverable ones and those behind an older blocker of their session. */
function judge(
  leased: readonly OutboxItem[],
  blockers: ReadonlyMap<string | null, Blocker>,
  skipSession: ((sessionId: string | null) => boolean) | undefined,
): { items: OutboxItem[]; deferred: DeferredItem[] } {
  const items: OutboxItem[] = [];
  const deferred: DeferredItem[] = [];
  for (const item of leased) {
    const behind = blockers.get(item.session_id);
    if (behind !== undefined && behind.seq < item.seq) {
      deferred.push({ seq: item.seq, session_id: item.session_id, behind });
    } else if (skipSession?.(item.session_id) === true) {
      deferred.push({ seq: item.seq, session_id: item.session_id, behind: null });
    } else items.push(item);
  }
  return { items, deferred };
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
 * For each session of the leased items, its lowest item that is DEAD, or PENDING and not leased
 * here, below one of the leased items of that session. The store lists items from the lowest seq
 * up and a claim takes the lowest free ones, so the PENDING items below the highest leased seq are
 * usually just these plus what other relays hold; DEAD items wait for an operator and are few.
 */
async function blockersBySession(
  tx: SubstrateTx,
  items: readonly OutboxItem[],
): Promise<Map<string | null, Blocker>> {
  const found = new Map<string | null, Blocker>();
  if (items.length === 0) return found;
  const mine = new Set(items.map((item) => item.seq));
  const highestBySession = new Map<string | null, number>();
  for (const item of items) highestBySession.set(item.session_id, item.seq);
  const highest = items[items.length - 1]!.seq;
  for (const status of ["PENDING", "DEAD"] as const) {
    let limit = items.length + 32;
    for (;;) {
      const listed = await tx.outbox.list({ status, limit });
      for (const other of listed) {
        if (other.seq >= highest) break;
        if (mine.has(other.seq)) continue;
        const top = highestBySession.get(other.session_id);
        const known = found.get(other.session_id);
        if (top !== undefined && other.seq < top && (known === undefined || other.seq < known.seq)) {
          found.set(other.session_id, {
            seq: other.seq,
            claimed_by: other.claimed_by,
            dead: status === "DEAD",
          });
        }
      }
      const last = listed[listed.length - 1];
      if (listed.length < limit || last === undefined || last.seq >= highest) break;
      limit *= 4;
    }
  }
  return found;
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
  /** Tried and failed: back to PENDING, free to claim again; `error` becomes last_error. */
  retry: readonly { seq: number; error: string }[];
  /**
   * Not tried this round (behind a failed entry of its session, or the sink stopped before it): back
   * to PENDING like `retry`, with the lease's attempt taken back. Absent: none.
   */
  release?: readonly { seq: number; error: string }[];
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
  const release = settlement.release ?? [];
  if (delivered.length + retry.length + dead.length + release.length === 0) {
    return Promise.resolve({ acked: 0 });
  }
  return substrate.transaction(async (tx) => {
    const acked = delivered.length === 0 ? 0 : await tx.outbox.ack(relayId, [...delivered]);
    for (const { seq, error } of retry) await tx.outbox.fail(relayId, seq, errorText(error), false);
    for (const { seq, error } of release) {
      await tx.outbox.fail(relayId, seq, errorText(error), false, { unsent: true });
    }
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
 * While an item is DEAD, its session's younger items wait behind it (claimBatch defers them), so a
 * requeued entry still reaches the sink before them: the session's order holds across a requeue.
 * @throws OutboxError "invalid_argument" (and changes nothing) unless exactly one of `all: true` and
 *   `seqs` is given, and every seq is a non-negative integer.
 */
export async function requeueDead(substrate: Substrate, options: RequeueDeadOptions): Promise<number> {
  const all = options?.all === true;
  const given = options?.seqs;
  if (all === (given !== undefined)) {
    throw new OutboxError("invalid_argument", "requeueDead needs exactly one of all: true and seqs");
  }
  let seqs: number[] | undefined;
  if (given !== undefined) {
    if (!Array.isArray(given)) throw new OutboxError("invalid_argument", "seqs must be an array of seqs");
    for (const seq of given) {
      if (!Number.isSafeInteger(seq) || seq < 0) {
        throw new OutboxError("invalid_argument", `seqs must be non-negative integers, got ${String(seq)}`);
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
