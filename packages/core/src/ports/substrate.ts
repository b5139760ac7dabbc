// The storage port: what every substrate (memory, SQLite, PostgreSQL) MUST provide to the engine.
// Types and guarantees only; implementations live in the substrate packages, never in core.

import { LeashBaseError } from "../errors/leash-error.js";
import type { Config, Nonce, Reason, SessionStatus, State } from "../types.js";
import type { ChainEntryRecord, ChainStore, OutboxEnqueue, OutboxStore } from "./audit.js";
import type { MessageRecord, MessageStore } from "./messages.js";

/** Bumped on any change an implementation must follow; substrates declare the one they implement. */
export const SUBSTRATE_SPECIFICATION_VERSION = "leash-substrate-v7" as const;

/** Decimal amounts travel as strings ("0.001"), never as binary floats (docs/architecture.md §6). */
export type DecimalString = string;

export interface SubstrateCapabilities {
  /** Several OS processes (or daemons) MAY share the store; transactions still serialize conflicting work. */
  readonly multiProcess: boolean;
  /** A committed transaction survives a crash of the process (and, for SQLite/PostgreSQL, of the machine). */
  readonly durable: boolean;
}

/** A registered session: identity, its guard config and its decision state. */
export interface SessionRecord {
  session_id: string;
  agent_id: string;
  organization_id: string;
  status: SessionStatus;
  config: Config;
  /** Decision state without `seen_nonces` (those are the chain entries' nonces: see NonceStore). */
  state: State;
  /** Monotonic call counter assigned by the engine (spec §4.3 call_number). */
  call_count: number;
  created_ns: number;
  updated_ns: number;
  /**
   * Liveness, not chain state: written by `insert` and `touch` only. `update` MUST leave the stored
   * value as it is, so a writer holding an older copy of the row cannot move a heartbeat back.
   */
  last_heartbeat_ns: number | null;
  /**
   * The seq of the chain entry that last wrote this row (its `row_digests` names the row's digest);
   * null for rows written before stamps existed. Written as given by the writer, returned unchanged.
   */
  at_seq: number | null;
}

export interface SessionStore {
  /** MUST return the row locked for the rest of the transaction (PostgreSQL: FOR UPDATE). */
  get(sessionId: string): Promise<SessionRecord | null>;
  /** MUST fail with SubstrateError code "conflict" when the id exists. */
  insert(record: SessionRecord): Promise<void>;
  /**
   * Writes every field but `last_heartbeat_ns`, which MUST stay as stored (see SessionRecord).
   * MUST fail with SubstrateError code "not_found" when the id does not exist.
   */
  update(record: SessionRecord): Promise<void>;
  /**
   * Records a heartbeat: writes `last_heartbeat_ns` = atNs and nothing else (no chain entry goes with
   * it, so the engine's in-memory copy of the row may be older). MUST fail with "not_found" when the
   * id does not exist.
   */
  touch(sessionId: string, atNs: number): Promise<void>;
  list(filter?: { status?: SessionStatus; limit?: number }): Promise<SessionRecord[]>;
}

/**
 * The nonces a session has spent, read from where they are recorded: the `nonce` column of its chain
 * entries (ChainEntryRecord.nonce, indexed), plus the rows a store's nonce table held before that
 * column existed (kept, read-only). Nothing writes through this port: a nonce is spent by appending
 * the entry that carries it, which `ChainStore.append` refuses when it was spent already. Both
 * methods MUST answer from this transaction's own appends too, and MUST NOT count a nonce twice.
 */
export interface NonceStore {
  /**
   * Whether the session has spent the nonce: an entry of the session carries it (appended in this
   * transaction or committed), or an older schema's nonce row holds it. The number 7 and the string
   * "7" are different nonces.
   */
  has(sessionId: string, nonce: Nonce): Promise<boolean>;
  /**
   * `has` for each pair, in order: one call, so a store can answer a batch's pairs in one
   * statement. An empty list gives an empty list.
   */
  hasEach(pairs: ReadonlyArray<{ sessionId: string; nonce: Nonce }>): Promise<boolean[]>;
  /** How many nonces the session has spent (entries carrying one, plus the older schema's rows). */
  count(sessionId: string): Promise<number>;
}

export type BudgetScopeKind = "session" | "agent" | "organization" | "guard";

/** A budget account: a limit and what has been spent and reserved against it, exactly. */
export interface BudgetAccount {
  account_id: string;
  scope: BudgetScopeKind;
  /** A child account can never spend more than its parent has left (nested guards). */
  parent_id: string | null;
  limit_usd: DecimalString;
  spent_usd: DecimalString;
  reserved_usd: DecimalString;
  created_ns: number;
  updated_ns: number;
  /**
   * The seq of the chain entry that last wrote this row (its `row_digests` names the row's digest);
   * null for rows written before stamps existed. Written as given by the writer, returned unchanged.
   */
  at_seq: number | null;
}

export type ReservationStatus = "PENDING" | "SETTLED" | "RELEASED" | "EXPIRED";

/** A two-phase hold on budget (reserve before a call, settle or release after). */
export interface Reservation {
  reservation_id: string;
  /** Every account the hold is charged to, child first (session → agent → organization, or guard → parent). */
  account_ids: string[];
  session_id: string;
  call_number: number;
  amount_usd: DecimalString;
  /** Set when settled: the truthful actual cost, which may exceed the estimate. */
  actual_usd: DecimalString | null;
  status: ReservationStatus;
  /** A settle/release carrying the same key again is a no-op. */
  idempotency_key: string | null;
  created_ns: number;
  expires_ns: number;
  resolved_ns: number | null;
  /**
   * The seq of the chain entry that last wrote this row, whose `row_digests` names its digest (schema
   * version 13); null or absent for rows written before. Written as given, returned unchanged.
   */
  at_seq?: number | null;
}

export interface BudgetStore {
  /** MUST return the row locked for the rest of the transaction (PostgreSQL: FOR UPDATE). */
  getAccount(accountId: string): Promise<BudgetAccount | null>;
  /** MUST fail with code "conflict" when the id exists. */
  insertAccount(account: BudgetAccount): Promise<void>;
  updateAccount(account: BudgetAccount): Promise<void>;
  /** MUST fail with code "conflict" when the id exists. */
  insertReservation(reservation: Reservation): Promise<void>;
  /** MUST return the row locked for the rest of the transaction. */
  getReservation(reservationId: string): Promise<Reservation | null>;
  updateReservation(reservation: Reservation): Promise<void>;
  /** PENDING reservations whose `expires_ns` <= nowNs, oldest first. */
  listExpired(nowNs: number, limit: number): Promise<Reservation[]>;
  listReservations(filter: { sessionId?: string; status?: ReservationStatus }): Promise<Reservation[]>;
}

/**
 * A shard's allotment of a shared budget account (escrow: docs/architecture.md "Escrow"): money the
 * account set aside for one shard, which that shard's engine spends without taking the account's row.
 */
export interface BudgetAllotment {
  account_id: string;
  /** The shard the allotment belongs to (one row per account and shard). */
  shard: string;
  /** The daemon that held the shard's lease when it was last granted, and that lease's epoch (fencing). */
  holder: string;
  epoch: number;
  /** Set aside for the shard; `spent_usd + reserved_usd` never exceeds it. */
  granted_usd: DecimalString;
  /** Spent and held within the allotment, as the shard's chain recorded them. */
  spent_usd: DecimalString;
  reserved_usd: DecimalString;
  /** After this the shard's lease may be gone: the allotment may be reclaimed (charged with its chain). */
  lease_expires_ns: number;
  created_ns: number;
  updated_ns: number;
  /** The chain position of the shard's entry that last charged it; null before any. */
  at_seq: number | null;
}

/** The allotment rows. Their arithmetic is @leash/budget-guard's (escrow-store.ts); this is rows only. */
export interface AllotmentStore {
  /** MUST return the row locked for the rest of the transaction (PostgreSQL: FOR UPDATE). */
  get(accountId: string, shard: string): Promise<BudgetAllotment | null>;
  /** Every allotment of the account, by shard (text order); not locked (the account row's lock orders grants). */
  list(accountId: string): Promise<BudgetAllotment[]>;
  /** Every allotment of every account, by account then shard (recovery's check). */
  listAll(): Promise<BudgetAllotment[]>;
  /** Inserts the row, or writes over the one with the same (account_id, shard). */
  put(allotment: BudgetAllotment): Promise<void>;
  /** Removes the row; nothing happens when there is none. */
  delete(accountId: string, shard: string): Promise<void>;
}

export type HitlRequestStatus = "PENDING" | "DECIDED" | "CONSUMED" | "EXPIRED";

/** A call that HITL paused, and the human's decision once made (spec §3.6). */
export interface HitlRequest {
  request_id: string;
  session_id: string;
  call_number: number;
  tool_name: string;
  nonce: Nonce | null;
  args_digest: string | null;
  reason: Reason;
  status: HitlRequestStatus;
  decision: string | null;
  operator_id: string | null;
  successor_nonce: Nonce | null;
  successor_args_digest: string | null;
  created_ns: number;
  decided_ns: number | null;
  /** The paused call's params as canonical JSON (spec §3.3): what the operator sees, byte for byte. */
  params_json: string | null;
  /** The session's budget when the call paused (exact decimals); null without a budget. */
  budget_spent_usd: DecimalString | null;
  budget_limit_usd: DecimalString | null;
  budget_remaining_usd: DecimalString | null;
  /** The guard config's identity: its canonical hash (or its name when it has one). */
  policy_id: string | null;
  /** When an unanswered request expires; null for requests written before expiry existed (never). */
  expires_ns: number | null;
  /** The operator's comment with the answer. */
  comment: string | null;
  /** For modify: the operator's params as canonical JSON (their digest is `successor_args_digest`). */
  successor_params_json: string | null;
  /**
   * The seq of the chain entry that last wrote this row, whose `row_digests` names its digest (schema
   * version 13); null or absent for rows written before. Written as given, returned unchanged.
   */
  at_seq?: number | null;
}

export interface HitlStore {
  insert(request: HitlRequest): Promise<void>;
  /** MUST return the row locked for the rest of the transaction. */
  get(requestId: string): Promise<HitlRequest | null>;
  update(request: HitlRequest): Promise<void>;
  list(filter: { sessionId?: string; status?: HitlRequestStatus }): Promise<HitlRequest[]>;
}

/**
 * What a batch of decisions writes, handed to the store in one call (SubstrateTx.writeBatch): the
 * chain entries with their outbox items and new budget holds, and the snapshot rows (sessions and
 * budget accounts) as they stand after them.
 */
export interface WriteBatch {
  /** Appended in this order, each as ChainStore.append would (contiguous seqs after the head). */
  readonly entries: readonly ChainEntryRecord[];
  /** Queued in this order, each as OutboxStore.enqueue would. */
  readonly outbox: readonly OutboxEnqueue[];
  /** Inserted in this order, each as BudgetStore.insertReservation would. */
  readonly reservations: readonly Reservation[];
  /** Existing rows written over, each as SessionStore.update would; one row per session. */
  readonly sessions: readonly SessionRecord[];
  /** Existing rows written over, each as BudgetStore.updateAccount would; one row per account. */
  readonly accounts: readonly BudgetAccount[];
  /** Inserted last, in this order, each as MessageStore.insert would (absent: none). */
  readonly messages?: readonly MessageRecord[];
}

/** The stores a transaction hands out; all reads and writes through them commit or roll back together. */
export interface SubstrateTx {
  readonly sessions: SessionStore;
  readonly nonces: NonceStore;
  readonly budgets: BudgetStore;
  readonly hitl: HitlStore;
  readonly chain: ChainStore;
  readonly outbox: OutboxStore;
  readonly messages: MessageStore;
  /**
   * Budget escrow's allotment rows (schema version 12). Optional: an overlay that does not pass it on
   * has none, and escrow then refuses to run on it rather than guess.
   */
  readonly allotments?: AllotmentStore;
  /**
   * Budget accounts this transaction's store serves from a source that changes without a chain entry
   * (escrow: an allotment topped up or returned in the background). A caller that keeps account rows
   * in memory between transactions MUST read these afresh in each one. Absent: none.
   */
  readonly volatileAccounts?: ReadonlySet<string>;
  /**
   * Writes a batch as the single calls would, in the order entries, outbox, reservations,
   * sessions, accounts, messages, and resolves once every write is done: reads that follow see them all. It
   * is one call so a store can send each kind as one statement (PostgreSQL: one multi-row statement
   * a kind, one round trip in all) instead of one per row.
   * - MUST reject with the error the first failing single call would give (SubstrateError
   *   "conflict" for a taken seq, entry id, spent nonce, queued seq, hold id or message id; "not_found" for a
   *   session or account that does not exist; TypeError for an entry with a nonce but no session).
   * - After it rejects, the transaction MUST NOT commit: the caller lets `fn` fail, and none of the
   *   batch's writes (nor any other of the transaction's) is kept. Before that, which of its writes
   *   a read would see is unspecified.
   * - An empty batch writes nothing and resolves.
   */
  writeBatch(batch: WriteBatch): Promise<void>;
}

/**
 * A storage backend for the engine.
 *
 * Guarantees every implementation MUST keep (the contract suite in @leash/substrate-contract checks them):
 * - `transaction(fn)` runs `fn` atomically and in isolation: either every write made through the
 *   stores it hands out is committed, or (when `fn` throws or rejects) none is, and the error is
 *   rethrown unchanged. Two transactions that touch the same session, account, reservation or
 *   nonce MUST behave as if run one after the other, across threads, processes and (for
 *   `multiProcess` substrates) machines. A substrate MAY retry `fn` after a serialization
 *   failure, so `fn` MUST have no side effects outside the stores.
 * - A transaction's promise resolves only after the commit is durable when `capabilities.durable`.
 * - `migrate()` brings an empty or an older store to the current schema, is idempotent, and is
 *   safe to run from several processes at once.
 * - Stores return copies: mutating a returned record never changes stored data until it is
 *   written back with `update…`.
 * - Numbers written come back equal; decimal strings come back as the same string. `*_ns` fields are
 *   integral numbers of nanoseconds since the Unix epoch (about 1.8e18, beyond 2^53 where doubles
 *   are 256 apart but still integers); every integral value below 2^63 MUST round-trip exactly.
 */
export interface Substrate {
  readonly specificationVersion: typeof SUBSTRATE_SPECIFICATION_VERSION;
  readonly kind: string;
  readonly capabilities: SubstrateCapabilities;
  migrate(): Promise<void>;
  transaction<T>(fn: (tx: SubstrateTx) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export type SubstrateErrorCode =
  | "conflict"
  | "not_found"
  | "busy"
  | "serialization"
  | "corrupt"
  | "closed"
  | "io";

/** The one error substrates throw for storage failures; `code` is stable, `cause` is kept. */
export class SubstrateError extends LeashBaseError<SubstrateErrorCode> {
  static override readonly marker = Symbol.for("leash.core.SubstrateError");
  override readonly name = "SubstrateError";
}
