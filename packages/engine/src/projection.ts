// The engine's in-memory projection of the sessions and budget accounts it decides on, and the overlay
// transaction that reads them from memory and writes each back once per batch. It decides nothing.
//
// Why: a decision needs its session, its budget accounts and the chain head; reading them from the store
// for every call (and writing each session and account once per call) is most of what a decision cost
// beyond its signature. Here they are read once (checked against the chain: state-auth.ts), kept while
// this engine is the only writer, and written back coalesced: one row per touched session and account
// per transaction, stamped with the entry that last changed it (row-guard.ts). What it costs: a batch's first statement
// reads the chain head under the store's write lock, and when other writers (processes, or this
// engine's own cold paths) appended since, their entries are read and the sessions they name (and
// every cached account) are dropped before anything is judged. This is sound because every change to
// a session or an account is written with a chain entry in the same transaction (heartbeats, which
// are not, only ever `touch` their own column).

import type { StateTable } from "@leash/chain";
import type {
  BudgetAccount,
  BudgetStore,
  ChainEntryRecord,
  ChainStore,
  HitlStore,
  MessageRecord,
  MessageStore,
  Nonce,
  NonceStore,
  OutboxEnqueue,
  OutboxStore,
  Reservation,
  SessionRecord,
  SessionStore,
  SubstrateTx,
  WriteBatch,
} from "@leash/core";
import { SubstrateError, writeBatchByRows } from "@leash/core";
import type { ChainHead } from "./audit.js";
import { continues, sameHead } from "./chain-tail.js";
import { overlaid, RowGuard, type RowStamps } from "./row-guard.js";
import { RowOverlay } from "./row-overlay.js";
import type { StateAuth } from "./state-auth.js";

/** Past this many foreign entries since the last batch, the whole projection is dropped instead of read. */
const FOLD_MAX = 512;
/** Past this many cached sessions the projection starts afresh (a simple bound on its memory). */
const SESSIONS_MAX = 50_000;

const messageKey = (sessionId: string, messageId: string) => `${sessionId}\u0000${messageId}`;
const nonceKey = (sessionId: string, nonce: Nonce) =>
  `${sessionId}\u0000${typeof nonce === "number" ? "n" : "s"}:${String(nonce)}`;

/** What the engine knows between transactions: rows as of `head`, which its last batch wrote. */
export class Projection {
  readonly sessions = new Map<string, SessionRecord>();
  readonly accounts = new Map<string, BudgetAccount>();
  /** The chain head when the cached rows were last known to be the store's; undefined: unknown. */
  head: ChainHead | null | undefined = undefined;
  /**
   * Transactions whose function has finished and whose COMMIT is still on its way, oldest first. The
   * next transaction reads their rows as the store's when the head it finds is the newest one's (its
   * writes are then in the store, committed or in the same open transaction); otherwise it ignores them.
   */
  readonly pending: ProjectionTx[] = [];

  /** @param auth checks the rows read from the store against the chain (absent: served unchecked). */
  constructor(readonly auth?: StateAuth) {}

  /** Opens an overlay over `tx` (the caller then calls `open` first thing in the transaction). */
  begin(tx: SubstrateTx): ProjectionTx {
    return new ProjectionTx(this, tx);
  }

  clear(): void {
    this.sessions.clear();
    this.accounts.clear();
    this.head = undefined;
  }

  /** The transaction's function has finished; its COMMIT is on its way. */
  judged(ptx: ProjectionTx): void {
    if (ptx.stamps.pending > 0) {
      // A row changed after the transaction's last entry: no signed entry names its digest.
      throw new TypeError("a state row was changed after the last chain entry of its transaction");
    }
    this.pending.push(ptx);
  }

  #settle(ptx: ProjectionTx): void {
    const at = this.pending.indexOf(ptx);
    if (at !== -1) this.pending.splice(at, 1);
  }

  /** After COMMIT: the overlay's rows become the projection, as of its last head. */
  committed(ptx: ProjectionTx): void {
    this.#settle(ptx);
    if (this.sessions.size > SESSIONS_MAX) this.sessions.clear();
    for (const [id, row] of ptx.sessionRows.rows) this.sessions.set(id, row);
    for (const [id, row] of ptx.accountRows.rows) this.accounts.set(id, row);
    this.head = ptx.currentHead;
  }

  /** A transaction failed: what it read or wrote cannot be trusted to be the store's. */
  failed(ptx: ProjectionTx): void {
    this.#settle(ptx);
    for (const id of ptx.sessionRows.rows.keys()) this.sessions.delete(id);
    this.accounts.clear();
    this.head = undefined;
  }

  /**
   * Drops what entries appended since `head` by other writers may have changed: the sessions they
   * name (every session for an entry without one) and every cached account.
   */
  fold(entries: readonly ChainEntryRecord[]): void {
    for (const entry of entries) {
      if (entry.session_id === null) {
        this.sessions.clear();
      } else {
        this.sessions.delete(entry.session_id);
      }
    }
    if (entries.length > 0) this.accounts.clear();
  }
}

type Undo = () => void;

/**
 * A SubstrateTx for one transaction: sessions and budget accounts come from the projection (read
 * through on a miss); they, the chain entries, their outbox items and new holds are written by
 * `flush`, in one SubstrateTx.writeBatch call (one statement a kind on PostgreSQL). Everything else
 * passes through, after the writes held so far (it may read them), counted, so the batch knows
 * whether a failed call left writes behind (`writesSince`).
 */
export class ProjectionTx implements SubstrateTx {
  /** Sessions and accounts as this transaction knows them, to become the projection at COMMIT. */
  readonly sessionRows: RowOverlay<SessionRecord>;
  readonly accountRows: RowOverlay<BudgetAccount>;
  readonly #journal: Undo[] = [];
  /** The rows changed since the last entry, which the next one names (state-auth.ts). */
  readonly stamps: RowStamps;
  /** Statements that reached the store and change it. */
  #writes = 0;
  /** Entries, outbox items and holds written since the last flush, in order (the batch's appends). */
  #entries: ChainEntryRecord[] = [];
  #outboxItems: OutboxEnqueue[] = [];
  #holds: Reservation[] = [];
  /** Decided messages recorded since the last flush (MessageStore.insert, held like the appends). */
  #decided: MessageRecord[] = [];
  #head: ChainHead | null | undefined = undefined;
  /** The head's seq when the transaction opened: entries up to it are committed. */
  #openSeq = -1;
  readonly #seenNonces = new Map<string, boolean>();
  /** What this transaction knows of (session, message id): a record, null for none, absent: unknown. */
  readonly #knownMessages = new Map<string, MessageRecord | null>();

  readonly sessions: SessionStore;
  readonly budgets: BudgetStore;
  readonly nonces: NonceStore;
  readonly chain: ChainStore;
  readonly hitl: HitlStore;
  readonly outbox: OutboxStore;
  readonly messages: MessageStore;

  constructor(
    private readonly projection: Projection,
    readonly tx: SubstrateTx,
  ) {
    // Statements that change the store; held appends go first, since they may read or touch them.
    const write = async <T>(send: () => Promise<T>): Promise<T> => {
      await this.#sendHeld();
      this.#writes++;
      return send();
    };
    const read = async <T>(send: () => Promise<T>): Promise<T> => {
      await this.#sendHeld();
      return send();
    };
    // A clash of an append (a taken seq, entry id, spent nonce, queued seq or hold id) fails the
    // whole transaction anyway: it is learnt when the batch is written, not at the call.
    const held = (append: () => void): Promise<void> => {
      append();
      return Promise.resolve();
    };
    const journal = (undo: Undo) => {
      this.#journal.push(undo);
    };
    const guard = new RowGuard(
      projection.auth,
      tx,
      journal,
      () => this.#openSeq,
      () => this.#nextSeq(),
    );
    const stamps = guard.stamps;
    this.stamps = stamps;
    const sessionRows: RowOverlay<SessionRecord> = new RowOverlay(
      projection.sessions,
      async (id) => guard.checked("sessions", id, await tx.sessions.get(id)),
      journal,
      (id) => stamps.changed(overlaid("sessions", id, sessionRows)),
    );
    const accountRows: RowOverlay<BudgetAccount> = new RowOverlay(
      projection.accounts,
      async (id) => guard.checked("budget_accounts", id, await tx.budgets.getAccount(id)),
      journal,
      (id) => stamps.changed(overlaid("budget_accounts", id, accountRows)),
    );
    // Rows a store changes without a chain entry (escrow allotments) are read afresh in every transaction.
    if (tx.volatileAccounts !== undefined) accountRows.fresh = tx.volatileAccounts;
    this.sessionRows = sessionRows;
    this.accountRows = accountRows;
    // An insert is a statement of its own (it may clash); once it reached the store, the row is known.
    const insert = <R extends { at_seq: number | null }>(
      table: StateTable,
      rows: RowOverlay<R>,
      id: string,
      row: R,
      send: (row: R) => Promise<void>,
    ) => {
      const out = { ...row, at_seq: this.#nextSeq() };
      return write(() => send(out)).then(() => {
        rows.known(id, out);
        stamps.changed(overlaid(table, id, rows));
      });
    };
    const self = this;
    this.sessions = {
      get: (id) => sessionRows.get(id),
      insert: (record) =>
        insert("sessions", sessionRows, record.session_id, record, (row) => tx.sessions.insert(row)),
      update: async (record) => sessionRows.update(record.session_id, record),
      async list(filter) {
        await self.flush();
        return tx.sessions.list(filter);
      },
      // Liveness, not projection: the store keeps it apart from the snapshot (SessionStore.touch).
      touch: (id, atNs) => write(() => tx.sessions.touch(id, atNs)),
    };
    this.budgets = {
      getAccount: (id) => accountRows.get(id),
      insertAccount: (account) =>
        insert("budget_accounts", accountRows, account.account_id, account, (row) =>
          tx.budgets.insertAccount(row),
        ),
      updateAccount: async (account) => accountRows.update(account.account_id, account),
      insertReservation: (reservation) => held(() => self.holdNow(reservation)),
      ...guard.holds(read, write),
    };
    this.nonces = {
      has: (sessionId, nonce) =>
        self.nonces.hasEach([{ sessionId, nonce }]).then(([spent]) => spent === true),
      async hasEach(pairs) {
        const answers = pairs.map(({ sessionId, nonce }) => self.#seenNonces.get(nonceKey(sessionId, nonce)));
        const unknown = pairs.filter((_, i) => answers[i] === undefined);
        const asked = unknown.length === 0 ? [] : await tx.nonces.hasEach(unknown);
        let next = 0;
        return answers.map((known) => known ?? asked[next++] === true);
      },
      count: (sessionId) => read(() => tx.nonces.count(sessionId)),
    };
    this.chain = {
      async head() {
        if (self.#head === undefined) self.#head = await tx.chain.head();
        return self.#head === null ? null : { ...self.#head };
      },
      append(entry) {
        try {
          self.appendNow(entry);
          return Promise.resolve();
        } catch (error) {
          return Promise.reject(error);
        }
      },
      // Entries before the first held one are the store's already (the chain id's genesis read).
      range: (fromSeq, limit) =>
        self.#entries.length === 0 || fromSeq + limit <= self.#entries[0]!.seq
          ? tx.chain.range(fromSeq, limit)
          : read(() => tx.chain.range(fromSeq, limit)),
      count: () => read(() => tx.chain.count()),
      params: (hashes) => read(() => tx.chain.params(hashes)),
    };
    this.hitl = guard.hitl(read, write);
    const outbox = tx.outbox;
    this.outbox = {
      enqueue: (item) => held(() => self.enqueueNow(item)),
      claim: (options) => write(() => outbox.claim(options)),
      ack: (relayId, seqs) => write(() => outbox.ack(relayId, seqs)),
      fail: (...args) => write(() => outbox.fail(...args)),
      requeue: (options) => write(() => outbox.requeue(options)),
      list: (filter) => read(() => outbox.list(filter)),
      counts: () => read(() => outbox.counts()),
    };
    this.messages = {
      get: (sessionId, messageId) =>
        self.messages.getEach([{ sessionId, messageId }]).then(([found]) => found ?? null),
      async getEach(pairs) {
        await self.prefetchMessages(pairs);
        return pairs.map(({ sessionId, messageId }) => self.messageNow(sessionId, messageId) ?? null);
      },
      insert: async (record) => self.recordMessageNow(record),
      prune: (beforeNs, limit) => write(() => tx.messages.prune(beforeNs, limit)),
      count: () => read(() => tx.messages.count()),
    };
  }

  // The hot path's synchronous side (evaluate's step, engine.ts): what memory holds, read without a
  // promise, and appends held without one. The port's methods above are these plus a promise.

  /** The chain head as this transaction knows it; undefined before `open` read it. */
  headNow(): ChainHead | null | undefined {
    return this.#head === undefined || this.#head === null ? this.#head : { ...this.#head };
  }

  /** Whether the session spent the nonce, when this transaction knows (prefetchNonces); else undefined. */
  spentNow(sessionId: string, nonce: Nonce): boolean | undefined {
    return this.#seenNonces.get(nonceKey(sessionId, nonce));
  }

  /**
   * Asks the store about the messages this transaction does not know yet, in one call (one
   * statement on PostgreSQL); their answers join what it recorded itself.
   */
  async prefetchMessages(pairs: ReadonlyArray<{ sessionId: string; messageId: string }>): Promise<void> {
    const unknown = pairs.filter((p) => !this.#knownMessages.has(messageKey(p.sessionId, p.messageId)));
    if (unknown.length === 0) return;
    const answers = await this.tx.messages.getEach(unknown);
    unknown.forEach(({ sessionId, messageId }, i) => {
      const key = messageKey(sessionId, messageId);
      if (!this.#knownMessages.has(key)) this.#knownMessages.set(key, answers[i] ?? null);
    });
  }

  /** The record of a message when this transaction knows it (null: known to be none); else undefined. */
  messageNow(sessionId: string, messageId: string): MessageRecord | null | undefined {
    const known = this.#knownMessages.get(messageKey(sessionId, messageId));
    return known === undefined || known === null ? known : { ...known };
  }

  /** MessageStore.insert, held for the flush; throws "conflict" for a message it knows is recorded. */
  recordMessageNow(record: MessageRecord): void {
    const key = messageKey(record.session_id, record.message_id);
    const before = this.#knownMessages.get(key);
    if (before !== undefined && before !== null) {
      throw new SubstrateError(
        "conflict",
        `message ${JSON.stringify(record.message_id)} is already recorded`,
      );
    }
    this.#journal.push(() => {
      if (before === undefined) this.#knownMessages.delete(key);
      else this.#knownMessages.set(key, before);
    });
    this.#knownMessages.set(key, { ...record });
    this.#holdRow(this.#decided, { ...record });
  }

  /** ChainStore.append, held for the flush; throws what the append would reject with. */
  appendNow(entry: ChainEntryRecord): void {
    if (entry.nonce !== undefined && entry.nonce !== null && entry.session_id === null) {
      throw new TypeError("a chain entry with a nonce needs a session_id");
    }
    const before = this.#head;
    // An entry that spends a nonce (ChainEntryRecord.nonce) makes it seen for the rest of the batch.
    const spent =
      entry.nonce === undefined || entry.nonce === null ? null : nonceKey(entry.session_id!, entry.nonce);
    const wasSeen = spent === null ? undefined : this.#seenNonces.get(spent);
    this.#journal.push(() => {
      this.#head = before;
      if (spent !== null) {
        if (wasSeen === undefined) this.#seenNonces.delete(spent);
        else this.#seenNonces.set(spent, wasSeen);
      }
    });
    this.#head = { seq: entry.seq, entry_hash: entry.entry_hash };
    if (spent !== null) this.#seenNonces.set(spent, true);
    this.#holdRow(this.#entries, { ...entry });
  }

  /** OutboxStore.enqueue, held for the flush. */
  enqueueNow(item: OutboxEnqueue): void {
    this.#holdRow(this.#outboxItems, { ...item });
  }

  /** BudgetStore.insertReservation, held for the flush; stamped with the entry that follows. */
  holdNow(reservation: Reservation): void {
    const row = { ...reservation, at_seq: this.#nextSeq() };
    this.stamps.changed({ table: "reservations", id: row.reservation_id, current: () => row });
    this.#holdRow(this.#holds, row);
  }

  /** The seq the next entry of this transaction takes. */
  #nextSeq(): number {
    const head = this.#head;
    return head === undefined || head === null ? 0 : head.seq + 1;
  }

  /** The `row_digests` of the entry at `seq`: the rows changed since the last one (Auditor). */
  rowDigestsFor(seq: number): Record<string, string> | undefined {
    return this.stamps.take(seq);
  }

  /** A held append: counted as a write, undone by the journal. */
  #holdRow<T>(list: T[], row: T): void {
    this.#writes++;
    list.push(row);
    this.#journal.push(() => {
      list.pop();
    });
  }

  /** Writes a batch through this overlay: its rows join the ones held for `flush`. */
  writeBatch(batch: WriteBatch): Promise<void> {
    return writeBatchByRows(this, batch);
  }

  /** Sends the held appends (and the rows changed so far) before a statement that may read them. */
  #sendHeld(): Promise<void> {
    return this.#entries.length + this.#outboxItems.length + this.#holds.length + this.#decided.length === 0
      ? Promise.resolve()
      : this.flush();
  }

  /**
   * First thing in the transaction: reads (and, on PostgreSQL, locks) the chain head and folds in
   * what other writers appended since the projection's head.
   */
  async open(): Promise<void> {
    const head = await this.tx.chain.head();
    this.#head = head;
    this.#openSeq = head === null ? -1 : head.seq;
    const newest = this.projection.pending.at(-1);
    if (newest !== undefined && sameHead(newest.currentHead, head)) {
      const layers = [...this.projection.pending].reverse();
      this.sessionRows.layerOver(layers.map((l) => l.sessionRows));
      this.accountRows.layerOver(layers.map((l) => l.accountRows));
      return;
    }
    const known = this.projection.head;
    if (known === undefined) {
      this.projection.sessions.clear();
      this.projection.accounts.clear();
      return;
    }
    const knownSeq = known === null ? -1 : known.seq;
    const headSeq = head === null ? -1 : head.seq;
    if (headSeq === knownSeq && (head === null || head.entry_hash === known?.entry_hash)) return;
    if (headSeq < knownSeq || headSeq - knownSeq > FOLD_MAX) {
      this.projection.clear();
      return;
    }
    const tail = await this.tx.chain.range(knownSeq + 1, headSeq - knownSeq);
    if (!continues(tail, knownSeq, known?.entry_hash, head)) {
      // Not a continuation of what this engine knew (a store restored or rewritten): start afresh.
      this.projection.clear();
      return;
    }
    this.projection.fold(tail);
  }

  /** Asks the store about many nonces in one call (NonceStore.hasEach: one statement on PostgreSQL). */
  async prefetchNonces(pairs: ReadonlyArray<{ sessionId: string; nonce: Nonce }>): Promise<void> {
    if (pairs.length === 0) return;
    const answers = await this.tx.nonces.hasEach(pairs);
    pairs.forEach(({ sessionId, nonce }, i) => {
      const key = nonceKey(sessionId, nonce);
      if (!this.#seenNonces.has(key)) this.#seenNonces.set(key, answers[i] === true);
    });
  }

  /** The head after this transaction's appends (what the projection will be as of). */
  get currentHead(): ChainHead | null | undefined {
    return this.#head;
  }

  /** A point to come back to when one call of the batch fails without having written. */
  mark(): { journal: number; writes: number } {
    return { journal: this.#journal.length, writes: this.#writes };
  }

  writesSince(mark: { writes: number }): boolean {
    return this.#writes !== mark.writes;
  }

  /** Undoes the in-memory changes made since `mark` (only when nothing reached the store since). */
  rollbackTo(mark: { journal: number }): void {
    while (this.#journal.length > mark.journal) this.#journal.pop()!();
  }

  /** Writes every session and account changed since the last flush, once each, as stamped. */
  async flush(): Promise<void> {
    const entries = this.#entries;
    const outbox = this.#outboxItems;
    const reservations = this.#holds;
    const messages = this.#decided;
    const unchanged = !this.sessionRows.dirty && !this.accountRows.dirty;
    if (unchanged && entries.length + outbox.length + reservations.length + messages.length === 0) return;
    this.#entries = [];
    this.#outboxItems = [];
    this.#holds = [];
    this.#decided = [];
    const sessions = this.sessionRows.writeBack();
    const accounts = this.accountRows.writeBack();
    this.#writes++;
    this.#journal.length = 0;
    await this.tx.writeBatch({
      entries,
      outbox,
      reservations,
      sessions,
      accounts,
      ...(messages.length === 0 ? {} : { messages }),
    });
  }
}
