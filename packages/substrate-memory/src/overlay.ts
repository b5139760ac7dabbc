// The committed data of one memory location, and the transaction-local overlay that makes a transaction atomic.
// It neither copies records nor serializes transactions: memory.ts clones at the boundary and queues.

import type {
  BudgetAccount,
  BudgetAllotment,
  ChainEntryRecord,
  HitlRequest,
  MessageRecord,
  Nonce,
  OutboxItem,
  Reservation,
  SessionRecord,
} from "@leash/core";

/** Everything committed at one location; all handles opened on the same shared key hold the same object. */
export interface DataSet {
  readonly sessions: Map<string, SessionRecord>;
  readonly accounts: Map<string, BudgetAccount>;
  /** Escrow allotments by account and shard (allotments.ts); null: deleted. */
  readonly allotments: Map<string, BudgetAllotment | null>;
  readonly reservations: Map<string, Reservation>;
  readonly hitl: Map<string, HitlRequest>;
  /** The chain's nonce index: session id → nonce key (see `nonceKey`) → seq of the entry that spent it. */
  readonly nonces: Map<string, Map<string, number>>;
  /** The committed chain: entry `seq` sits at index `seq`, because append only ever takes the next seq. */
  readonly chain: ChainEntryRecord[];
  readonly chainEntryIds: Set<string>;
  /** Params texts by digest (ChainEntryRecord.params), each kept once. */
  readonly params: Map<string, string>;
  /** Outbox items by `outboxKey(seq)`. */
  readonly outbox: Map<string, OutboxItem>;
  /** Decided messages by `messageKey(session_id, message_id)` (messages.ts). */
  readonly messages: Map<string, MessageRecord>;
  /** Tail of the transaction queue: the next transaction starts when this settles. */
  tail: Promise<void>;
  /** Token of the transaction running now, so a nested transaction fails instead of deadlocking. */
  active: object | null;
}

export function createDataSet(): DataSet {
  return {
    sessions: new Map(),
    accounts: new Map(),
    allotments: new Map(),
    reservations: new Map(),
    hitl: new Map(),
    nonces: new Map(),
    chain: [],
    chainEntryIds: new Set(),
    params: new Map(),
    outbox: new Map(),
    messages: new Map(),
    tail: Promise.resolve(),
    active: null,
  };
}

/**
 * The number 7 and the string "7" must stay different nonces (port contract), so the key carries the type.
 * -0 folds into 0, as it would through JSON or an SQL integer column.
 */
export function nonceKey(nonce: Nonce): string {
  return `${typeof nonce}:${String(nonce)}`;
}

/** Outbox keys are strings (OverlayTable's key type); String() of an integral number is exact and unique. */
export function outboxKey(seq: number): string {
  return String(seq);
}

/** One table seen through a transaction: reads fall through to the committed map, writes stay here. */
export class OverlayTable<T> {
  readonly #base: Map<string, T>;
  readonly #writes = new Map<string, T>();

  constructor(base: Map<string, T>) {
    this.#base = base;
  }

  get(id: string): T | undefined {
    return this.#writes.has(id) ? this.#writes.get(id) : this.#base.get(id);
  }

  has(id: string): boolean {
    return this.#writes.has(id) || this.#base.has(id);
  }

  set(id: string, value: T): void {
    this.#writes.set(id, value);
  }

  /** Committed rows (with this transaction's versions) in insertion order, then rows this transaction added. */
  *values(): IterableIterator<T> {
    for (const [id, value] of this.#base) yield this.#writes.has(id) ? (this.#writes.get(id) as T) : value;
    for (const [id, value] of this.#writes) if (!this.#base.has(id)) yield value;
  }

  commit(): void {
    for (const [id, value] of this.#writes) this.#base.set(id, value);
  }
}

/**
 * The chain's nonce index seen through a transaction; appends only ever add to it, so a rollback is
 * dropping `#writes` with the overlay, exactly as the entries that carried them are dropped.
 */
export class OverlayNonces {
  readonly #base: Map<string, Map<string, number>>;
  readonly #writes = new Map<string, Map<string, number>>();

  constructor(base: Map<string, Map<string, number>>) {
    this.#base = base;
  }

  has(sessionId: string, key: string): boolean {
    return (this.#writes.get(sessionId)?.has(key) ?? false) || (this.#base.get(sessionId)?.has(key) ?? false);
  }

  add(sessionId: string, key: string, seq: number): void {
    let added = this.#writes.get(sessionId);
    if (added === undefined) {
      added = new Map();
      this.#writes.set(sessionId, added);
    }
    added.set(key, seq);
  }

  /** Exact because `add` is only called for keys `has` denied, so the two sets never overlap. */
  count(sessionId: string): number {
    return (this.#base.get(sessionId)?.size ?? 0) + (this.#writes.get(sessionId)?.size ?? 0);
  }

  commit(): void {
    for (const [sessionId, added] of this.#writes) {
      let committed = this.#base.get(sessionId);
      if (committed === undefined) {
        committed = new Map();
        this.#base.set(sessionId, committed);
      }
      for (const [key, seq] of added) committed.set(key, seq);
    }
  }
}

/**
 * The chain seen through a transaction: committed entries, then the ones this transaction appended.
 * Append-only and gapless, so an entry's index is its seq and rollback is dropping `#added`.
 */
export class OverlayChain {
  readonly #base: ChainEntryRecord[];
  readonly #baseIds: Set<string>;
  readonly #added: ChainEntryRecord[] = [];
  readonly #addedIds = new Set<string>();

  constructor(base: ChainEntryRecord[], baseIds: Set<string>) {
    this.#base = base;
    this.#baseIds = baseIds;
  }

  get length(): number {
    return this.#base.length + this.#added.length;
  }

  at(seq: number): ChainEntryRecord | undefined {
    return seq < this.#base.length ? this.#base[seq] : this.#added[seq - this.#base.length];
  }

  hasEntryId(entryId: string): boolean {
    return this.#baseIds.has(entryId) || this.#addedIds.has(entryId);
  }

  /** The caller has checked that `entry.seq` is `length` and its entry_id is new. */
  push(entry: ChainEntryRecord): void {
    this.#added.push(entry);
    this.#addedIds.add(entry.entry_id);
  }

  commit(): void {
    for (const entry of this.#added) {
      this.#base.push(entry);
      this.#baseIds.add(entry.entry_id);
    }
  }
}
