// The in-memory reference substrate: one transaction at a time, atomic through an overlay, copies at the edge.
// It is neither durable nor shared between processes; it is the simplest store that keeps every port guarantee.

import { AsyncLocalStorage } from "node:async_hooks";
import {
  type BudgetAccount,
  type BudgetAllotment,
  type BudgetStore,
  type ChainEntryRecord,
  type ChainStore,
  type HitlRequest,
  type HitlStore,
  hasEachByOne,
  type Nonce,
  type NonceStore,
  type OutboxItem,
  type OutboxStatus,
  type OutboxStore,
  type Reservation,
  type SessionRecord,
  type SessionStore,
  SUBSTRATE_SPECIFICATION_VERSION,
  type Substrate,
  type SubstrateCapabilities,
  SubstrateError,
  type SubstrateTx,
  type WriteBatch,
  writeBatchByRows,
} from "@leash/core";
import { memoryAllotmentStore } from "./allotments.js";
import { copyRecord } from "./copy.js";
import { memoryMessageStore, OverlayMessages } from "./messages.js";
import {
  createDataSet,
  type DataSet,
  nonceKey,
  OverlayChain,
  OverlayNonces,
  OverlayTable,
  outboxKey,
} from "./overlay.js";

export interface MemorySubstrateOptions {
  /**
   * Handles created with the same key share one process-wide data set and one transaction queue, like
   * two connections to one database file. Without it the handle gets a private data set.
   */
  shared?: string;
  /**
   * Turn a transaction started inside another one on the same data (which would wait for itself) into
   * a "busy" error instead of a hang. Off by default: telling "inside" from "beside" takes an
   * AsyncLocalStorage, and on Node 20 running one installs a hook on every promise the process
   * creates from then on, a cost every decision pays. For tests and debugging. The outer transaction's
   * handle must have it on for an inner one to be caught.
   */
  detectNestedTransactions?: boolean;
}

const sharedDataSets = new Map<string, DataSet>();

/**
 * Which transaction the current async context runs inside, to turn a nested transaction into an error;
 * only handles with detectNestedTransactions run inside it (see there why).
 */
const runningTransaction = new AsyncLocalStorage<object>();

/**
 * Forgets the data set behind a shared key (tests call it to free memory). Handles still open on the key
 * keep the old data; the next handle created with the key starts empty. Returns whether the key existed.
 */
export function deleteSharedMemory(key: string): boolean {
  return sharedDataSets.delete(key);
}

export function createMemorySubstrate(options: MemorySubstrateOptions = {}): MemorySubstrate {
  return new MemorySubstrate(options);
}

// Every record crosses the store boundary as a deep copy, in both directions, so neither the caller's
// object nor a returned one can alias what is stored.
const copy: <T>(value: T) => T = copyRecord;

export class MemorySubstrate implements Substrate {
  readonly specificationVersion = SUBSTRATE_SPECIFICATION_VERSION;
  readonly kind = "memory";
  readonly capabilities: SubstrateCapabilities = Object.freeze({ multiProcess: false, durable: false });

  readonly #data: DataSet;
  readonly #inFlight = new Set<Promise<unknown>>();
  readonly #detectNested: boolean;
  #closed = false;

  constructor(options: MemorySubstrateOptions = {}) {
    this.#detectNested = options.detectNestedTransactions === true;
    if (options.shared === undefined) {
      this.#data = createDataSet();
    } else {
      let data = sharedDataSets.get(options.shared);
      if (data === undefined) {
        data = createDataSet();
        sharedDataSets.set(options.shared, data);
      }
      this.#data = data;
    }
  }

  /** The tables exist from creation, so there is nothing to bring up to date; only a closed handle fails. */
  async migrate(): Promise<void> {
    this.#assertOpen();
  }

  transaction<T>(fn: (tx: SubstrateTx) => Promise<T>): Promise<T> {
    if (this.#closed) return Promise.reject(closedError());
    const data = this.#data;
    const enclosing = runningTransaction.getStore();
    if (enclosing !== undefined && enclosing === data.active) {
      // The inner transaction would wait for the outer one, which waits for the inner one: fail loudly.
      return Promise.reject(
        new SubstrateError("busy", "a transaction was started inside another transaction on the same data"),
      );
    }
    const detect = this.#detectNested;
    const result = data.tail.then(() => runTransaction(data, fn, detect));
    data.tail = result.then(ignore, ignore);
    const tracked = result.then(ignore, ignore);
    this.#inFlight.add(tracked);
    void tracked.then(() => this.#inFlight.delete(tracked));
    return result;
  }

  /** Refuses new transactions at once, and resolves when the ones already queued on this handle have ended. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(this.#inFlight);
  }

  #assertOpen(): void {
    if (this.#closed) throw closedError();
  }
}

function ignore(): void {}

function closedError(): SubstrateError {
  return new SubstrateError("closed", "the memory substrate handle is closed");
}

async function runTransaction<T>(
  data: DataSet,
  fn: (tx: SubstrateTx) => Promise<T>,
  detectNested: boolean,
): Promise<T> {
  const token = {};
  const tx = new MemoryTransaction(data);
  data.active = token;
  try {
    // Calling fn inside the async function turns a synchronous throw into a rejection like any other.
    const result = await (detectNested ? runningTransaction.run(token, () => fn(tx.stores)) : fn(tx.stores));
    tx.commit();
    return result;
  } finally {
    tx.end();
    data.active = null;
  }
}

/** The stores of one transaction; after commit or rollback every store call fails with code "closed". */
class MemoryTransaction {
  readonly #sessions: OverlayTable<SessionRecord>;
  readonly #accounts: OverlayTable<BudgetAccount>;
  readonly #allotments: OverlayTable<BudgetAllotment | null>;
  readonly #reservations: OverlayTable<Reservation>;
  readonly #hitl: OverlayTable<HitlRequest>;
  readonly #nonces: OverlayNonces;
  readonly #chain: OverlayChain;
  readonly #outbox: OverlayTable<OutboxItem>;
  readonly #messages: OverlayMessages;
  readonly #params: OverlayTable<string>;
  #ended = false;
  readonly stores: SubstrateTx;

  constructor(data: DataSet) {
    this.#sessions = new OverlayTable(data.sessions);
    this.#accounts = new OverlayTable(data.accounts);
    this.#allotments = new OverlayTable(data.allotments);
    this.#reservations = new OverlayTable(data.reservations);
    this.#hitl = new OverlayTable(data.hitl);
    this.#nonces = new OverlayNonces(data.nonces);
    this.#chain = new OverlayChain(data.chain, data.chainEntryIds);
    this.#outbox = new OverlayTable(data.outbox);
    this.#messages = new OverlayMessages(data.messages);
    this.#params = new OverlayTable(data.params);
    const rows = {
      sessions: this.#sessionStore(),
      nonces: this.#nonceStore(),
      budgets: this.#budgetStore(),
      hitl: this.#hitlStore(),
      chain: this.#chainStore(),
      outbox: this.#outboxStore(),
      messages: memoryMessageStore(this.#messages, () => this.#live()),
      allotments: memoryAllotmentStore(this.#allotments, () => this.#live()),
    };
    this.stores = Object.freeze({
      ...rows,
      writeBatch: (batch: WriteBatch) => writeBatchByRows(rows, batch),
    });
  }

  commit(): void {
    this.#live();
    this.#sessions.commit();
    this.#accounts.commit();
    this.#allotments.commit();
    this.#reservations.commit();
    this.#hitl.commit();
    this.#nonces.commit();
    this.#chain.commit();
    this.#outbox.commit();
    this.#messages.commit();
    this.#params.commit();
  }

  /** Uncommitted writes are simply dropped with the overlay: that is the whole rollback. */
  end(): void {
    this.#ended = true;
  }

  // A store leaked out of its transaction would otherwise write into an overlay nobody commits.
  #live(): void {
    if (this.#ended) throw new SubstrateError("closed", "the transaction has already ended");
  }

  #sessionStore(): SessionStore {
    const table = this.#sessions;
    return {
      get: async (sessionId) => {
        this.#live();
        return copyOrNull(table.get(sessionId));
      },
      insert: async (record) => {
        this.#live();
        if (table.has(record.session_id)) throw conflict("session", record.session_id);
        table.set(record.session_id, copy(record));
      },
      update: async (record) => {
        this.#live();
        const stored = table.get(record.session_id);
        if (stored === undefined) throw notFound("session", record.session_id);
        // The heartbeat is liveness, written by touch only (SessionStore.update).
        table.set(record.session_id, { ...copy(record), last_heartbeat_ns: stored.last_heartbeat_ns });
      },
      touch: async (sessionId, atNs) => {
        this.#live();
        const stored = table.get(sessionId);
        if (stored === undefined) throw notFound("session", sessionId);
        table.set(sessionId, { ...copy(stored), last_heartbeat_ns: atNs });
      },
      list: async (filter = {}) => {
        this.#live();
        const rows = [...table.values()].filter(
          (s) => filter.status === undefined || s.status === filter.status,
        );
        return limited(rows, filter.limit).map((row) => copy(row));
      },
    };
  }

  #nonceStore(): NonceStore {
    const nonces = this.#nonces;
    const has = async (sessionId: string, nonce: Nonce) => {
      this.#live();
      return nonces.has(sessionId, nonceKey(nonce));
    };
    return {
      has,
      hasEach: (pairs) => hasEachByOne({ has }, pairs),
      count: async (sessionId: string) => {
        this.#live();
        return nonces.count(sessionId);
      },
    };
  }

  #budgetStore(): BudgetStore {
    const accounts = this.#accounts;
    const reservations = this.#reservations;
    return {
      getAccount: async (accountId) => {
        this.#live();
        return copyOrNull(accounts.get(accountId));
      },
      insertAccount: async (account) => {
        this.#live();
        if (accounts.has(account.account_id)) throw conflict("budget account", account.account_id);
        accounts.set(account.account_id, copy(account));
      },
      updateAccount: async (account) => {
        this.#live();
        if (!accounts.has(account.account_id)) throw notFound("budget account", account.account_id);
        accounts.set(account.account_id, copy(account));
      },
      insertReservation: async (reservation) => {
        this.#live();
        if (reservations.has(reservation.reservation_id)) {
          throw conflict("reservation", reservation.reservation_id);
        }
        reservations.set(reservation.reservation_id, copy(reservation));
      },
      getReservation: async (reservationId) => {
        this.#live();
        return copyOrNull(reservations.get(reservationId));
      },
      updateReservation: async (reservation) => {
        this.#live();
        if (!reservations.has(reservation.reservation_id)) {
          throw notFound("reservation", reservation.reservation_id);
        }
        reservations.set(reservation.reservation_id, copy(reservation));
      },
      listExpired: async (nowNs, limit) => {
        this.#live();
        const expired = [...reservations.values()]
          .filter((r) => r.status === "PENDING" && r.expires_ns <= nowNs)
          .sort(oldestFirst);
        return limited(expired, limit).map((row) => copy(row));
      },
      listReservations: async (filter) => {
        this.#live();
        return [...reservations.values()]
          .filter(
            (r) =>
              (filter.sessionId === undefined || r.session_id === filter.sessionId) &&
              (filter.status === undefined || r.status === filter.status),
          )
          .map((row) => copy(row));
      },
    };
  }

  #hitlStore(): HitlStore {
    const table = this.#hitl;
    return {
      insert: async (request) => {
        this.#live();
        if (table.has(request.request_id)) throw conflict("HITL request", request.request_id);
        table.set(request.request_id, copy(request));
      },
      get: async (requestId) => {
        this.#live();
        return copyOrNull(table.get(requestId));
      },
      update: async (request) => {
        this.#live();
        if (!table.has(request.request_id)) throw notFound("HITL request", request.request_id);
        table.set(request.request_id, copy(request));
      },
      list: async (filter) => {
        this.#live();
        return [...table.values()]
          .filter(
            (r) =>
              (filter.sessionId === undefined || r.session_id === filter.sessionId) &&
              (filter.status === undefined || r.status === filter.status),
          )
          .map((row) => copy(row));
      },
    };
  }

  // Transactions on one data set run one at a time, so the head is locked simply by being inside one.
  #chainStore(): ChainStore {
    const chain = this.#chain;
    const nonces = this.#nonces;
    const params = this.#params;
    return {
      head: async () => {
        this.#live();
        const last = chain.at(chain.length - 1);
        return last === undefined ? null : { seq: last.seq, entry_hash: last.entry_hash };
      },
      append: async (entry) => {
        this.#live();
        checkBody(entry.body);
        // Only the next seq is accepted: an earlier one is taken, a later one would leave a gap.
        if (entry.seq !== chain.length) throw chainConflict(entry.seq, chain.length - 1);
        if (chain.hasEntryId(entry.entry_id)) throw conflict("chain entry", entry.entry_id);
        const nonce = entry.nonce ?? null;
        const key = nonce === null ? null : nonceKey(nonce);
        if (key !== null) {
          if (entry.session_id === null) throw new TypeError("a chain entry with a nonce needs a session_id");
          if (nonces.has(entry.session_id, key)) {
            throw new SubstrateError(
              "conflict",
              `nonce ${JSON.stringify(nonce)} (${typeof nonce}) is already spent in session ${JSON.stringify(entry.session_id)}`,
            );
          }
        }
        // Stored without the field when it has no nonce, so range gives back what was appended.
        const { nonce: _omit, params: blob, ...rest } = entry;
        chain.push(copy(nonce === null ? rest : { ...rest, nonce }));
        if (key !== null) nonces.add(entry.session_id as string, key, entry.seq);
        if (blob !== undefined && !params.has(blob.hash)) params.set(blob.hash, blob.text);
      },
      params: async (hashes) => {
        this.#live();
        const found = new Map<string, string>();
        for (const hash of hashes) {
          const text = params.get(hash);
          if (text !== undefined) found.set(hash, text);
        }
        return found;
      },
      range: async (fromSeq, limit) => {
        this.#live();
        const rows: ChainEntryRecord[] = [];
        for (let seq = Math.max(0, Math.ceil(fromSeq)); seq < chain.length && rows.length < limit; seq++) {
          rows.push(copy(chain.at(seq) as ChainEntryRecord));
        }
        return rows;
      },
      count: async () => {
        this.#live();
        return chain.length;
      },
    };
  }

  #outboxStore(): OutboxStore {
    const table = this.#outbox;
    /** The item `relayId` holds the lease on, or undefined: PENDING and claimed by it. */
    const held = (relayId: string, seq: number): OutboxItem | undefined => {
      const item = table.get(outboxKey(seq));
      return item?.status === "PENDING" && item.claimed_by === relayId ? item : undefined;
    };
    return {
      enqueue: async (item) => {
        this.#live();
        const key = outboxKey(item.seq);
        if (table.has(key)) throw conflict("outbox item", key);
        table.set(key, {
          seq: item.seq,
          entry_id: item.entry_id,
          session_id: item.session_id,
          status: "PENDING",
          attempts: 0,
          claimed_by: null,
          lease_until_ns: null,
          last_error: null,
          created_ns: item.created_ns,
        });
      },
      claim: async (options) => {
        this.#live();
        return claimOutbox(table, options);
      },
      ack: async (relayId, seqs) => {
        this.#live();
        let acked = 0;
        for (const seq of new Set(seqs)) {
          const item = held(relayId, seq);
          if (item === undefined) continue;
          table.set(outboxKey(seq), { ...item, status: "DELIVERED", lease_until_ns: null });
          acked++;
        }
        return acked;
      },
      fail: async (relayId, seq, error, dead, options) => {
        this.#live();
        const item = held(relayId, seq);
        if (item === undefined) return;
        // Given back untried (`unsent`): the claim's attempt is taken back.
        const attempts = options?.unsent === true ? Math.max(item.attempts - 1, 0) : item.attempts;
        table.set(
          outboxKey(seq),
          dead
            ? { ...item, status: "DEAD", lease_until_ns: null, last_error: error }
            : { ...item, claimed_by: null, lease_until_ns: null, last_error: error, attempts },
        );
      },
      requeue: async (options) => {
        this.#live();
        return requeueOutbox(table, options);
      },
      list: async (filter) => {
        this.#live();
        const rows = [...table.values()]
          .filter((i) => filter.status === undefined || i.status === filter.status)
          .sort(bySeq);
        return limited(rows, filter.limit).map((row) => copy(row));
      },
      counts: async () => {
        this.#live();
        const counts: Record<OutboxStatus, number> = { PENDING: 0, DELIVERED: 0, DEAD: 0 };
        for (const item of table.values()) counts[item.status]++;
        return counts;
      },
    };
  }
}

function copyOrNull<T>(value: T | undefined): T | null {
  return value === undefined ? null : copy(value);
}

function limited<T>(rows: T[], limit: number | undefined): T[] {
  return limit === undefined ? rows : rows.slice(0, Math.max(0, limit));
}

/** "Oldest first": the hold that expired earliest goes first; ties by creation, then id, for a stable order. */
function oldestFirst(a: Reservation, b: Reservation): number {
  return (
    a.expires_ns - b.expires_ns ||
    a.created_ns - b.created_ns ||
    (a.reservation_id < b.reservation_id ? -1 : a.reservation_id > b.reservation_id ? 1 : 0)
  );
}

/** Stands in for a requeued item's reason when it died without one (the port's wording). */
const NO_ERROR_RECORDED = "no error recorded";

/** The port's selector rule, checked before anything changes: exactly one of `all: true` and `seqs`. */
function requeueSelection(options: { seqs?: number[]; all?: boolean; nowNs: number }): {
  seqs: readonly number[] | "all";
  nowNs: number;
} {
  const all = options?.all === true;
  const hasSeqs = options?.seqs !== undefined;
  if (all === hasSeqs) throw new TypeError("requeue needs exactly one of all: true and seqs");
  if (hasSeqs && !Array.isArray(options.seqs)) throw new TypeError("requeue seqs must be an array");
  // nowNs goes into last_error as its exact digits, which only an integer has.
  if (typeof options.nowNs !== "number" || !Number.isInteger(options.nowNs)) {
    throw new RangeError(`nowNs must be an integer, got ${String(options.nowNs)}`);
  }
  return { seqs: all ? "all" : (options.seqs as number[]), nowNs: options.nowNs };
}

/** OutboxStore.claim on the outbox table: the free PENDING items, oldest first, leased to `relayId`. */
function claimOutbox(
  table: OverlayTable<OutboxItem>,
  { relayId, limit, nowNs, leaseNs }: Parameters<OutboxStore["claim"]>[0],
): OutboxItem[] {
  // The sum is taken as a double here, as in every substrate, so all of them store the same lease end.
  const leaseUntil = nowNs + leaseNs;
  const free = [...table.values()]
    .filter((i) => i.status === "PENDING" && (i.lease_until_ns === null || i.lease_until_ns <= nowNs))
    .sort(bySeq);
  return limited(free, limit).map((item) => {
    const claimed: OutboxItem = {
      ...item,
      claimed_by: relayId,
      lease_until_ns: leaseUntil,
      attempts: item.attempts + 1,
    };
    table.set(outboxKey(item.seq), claimed);
    return copy(claimed);
  });
}

/** OutboxStore.requeue on the outbox table: DEAD items PENDING again, their reason kept. */
function requeueOutbox(
  table: OverlayTable<OutboxItem>,
  options: Parameters<OutboxStore["requeue"]>[0],
): number {
  const { seqs, nowNs } = requeueSelection(options);
  const prefix = `requeued at ${BigInt(nowNs).toString()}: `;
  const dead =
    seqs === "all"
      ? [...table.values()].filter((i) => i.status === "DEAD")
      : [...new Set(seqs)].flatMap((seq) => {
          const item = table.get(outboxKey(seq));
          return item?.status === "DEAD" ? [item] : [];
        });
  for (const item of dead) {
    table.set(outboxKey(item.seq), {
      ...item,
      status: "PENDING",
      attempts: 0,
      claimed_by: null,
      lease_until_ns: null,
      last_error: `${prefix}${item.last_error ?? NO_ERROR_RECORDED}`,
    });
  }
  return dead.length;
}

function bySeq(a: OutboxItem, b: OutboxItem): number {
  return a.seq - b.seq;
}

/** A lone surrogate: high without low, or low without high. No `u` flag, so it sees UTF-16 code units. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * No lone surrogate in `s`. String#isWellFormed (ES2024, Node 20) answers a Latin-1 string, which
 * cannot hold a surrogate, without reading it; the regex is the fallback where it is missing.
 */
const wellFormed: (s: string) => boolean =
  typeof (String.prototype as { isWellFormed?: unknown }).isWellFormed === "function"
    ? (s) => (s as unknown as { isWellFormed(): boolean }).isWellFormed()
    : (s) => !LONE_SURROGATE.test(s);

/**
 * The body is hashed, so it must come back byte for byte from every substrate. A lone surrogate would
 * reach SQLite and PostgreSQL as U+FFFD and U+0000 cannot be stored in PostgreSQL text: all refuse them
 * alike (canonical JSON never holds either raw), this one included, so no substrate keeps what others cannot.
 */
function checkBody(body: string): void {
  if (typeof body !== "string" || !wellFormed(body) || body.includes("\u0000")) {
    throw new TypeError("chain entry body must be well-formed Unicode text without U+0000");
  }
}

function chainConflict(seq: number, headSeq: number): SubstrateError {
  const head = headSeq < 0 ? "the chain is empty" : `the head is at ${headSeq}`;
  return new SubstrateError(
    "conflict",
    seq <= headSeq
      ? `chain seq ${seq} is taken (${head})`
      : `chain seq ${seq} is not the next one (${head}): appending it would leave a gap`,
  );
}

function conflict(what: string, id: string): SubstrateError {
  return new SubstrateError("conflict", `${what} ${JSON.stringify(id)} already exists`);
}

function notFound(what: string, id: string): SubstrateError {
  return new SubstrateError("not_found", `${what} ${JSON.stringify(id)} does not exist`);
}
