// The seven stores a SQLite transaction hands out, over prepared statements cached per connection.
// They run inside a transaction the substrate opened; they never BEGIN, COMMIT or lock by themselves.

import type {
  BudgetAccount,
  BudgetStore,
  ChainEntryRecord,
  ChainStore,
  HitlRequest,
  HitlRequestStatus,
  HitlStore,
  MessageStore,
  Nonce,
  NonceStore,
  OutboxStore,
  Reservation,
  ReservationStatus,
  SessionRecord,
  SessionStatus,
  SessionStore,
  SubstrateTx,
  WriteBatch,
} from "@leash/core";
import { hasEachByOne, SubstrateError, writeBatchByRows } from "@leash/core";
import type Database from "better-sqlite3";
import { SqliteAllotments } from "./allotments.js";
import {
  type AccountRow,
  accountToRow,
  type ChainRow,
  chainToRow,
  checkedInteger,
  encodeNonce,
  type HitlRow,
  hitlToRow,
  type ReservationRow,
  reservationToRow,
  rowToAccount,
  rowToChain,
  rowToHitl,
  rowToReservation,
  rowToSession,
  type SessionRow,
  sessionToRow,
  text,
} from "./codec.js";
import { DECISION_SQL } from "./decision-sql.js";
import { isDriverError, toSubstrateError } from "./errors.js";
import { SqliteMessages } from "./messages.js";
import { Outbox } from "./outbox.js";
import type { HeadRow, RowCache } from "./row-cache.js";
import { limitOf, notFound } from "./store-util.js";

/** Prepared statements by SQL text, one cache per connection: preparing costs more than running. */
export class StatementCache {
  readonly #db: Database.Database;
  readonly #cache = new Map<string, Database.Statement>();

  constructor(db: Database.Database) {
    this.#db = db;
  }

  get(sql: string): Database.Statement {
    let statement = this.#cache.get(sql);
    if (statement === undefined) {
      statement = this.#db.prepare(sql);
      this.#cache.set(sql, statement);
    }
    return statement;
  }
}

/**
 * One transaction's view of the connection. Its stores refuse to work once the transaction has
 * finished, so a record written through a leaked `tx` can never land in someone else's transaction.
 */
export class SqliteTx implements SubstrateTx {
  #open = true;
  readonly sessions: SessionStore;
  readonly nonces: NonceStore;
  readonly budgets: BudgetStore;
  readonly hitl: HitlStore;
  readonly chain: ChainStore;
  readonly outbox: OutboxStore;
  readonly messages: MessageStore;
  readonly allotments: SqliteAllotments;

  constructor(
    readonly statements: StatementCache,
    readonly rows: RowCache,
  ) {
    this.sessions = new Sessions(this);
    this.nonces = new Nonces(this);
    this.budgets = new Budgets(this);
    this.hitl = new Hitl(this);
    this.chain = new Chain(this);
    this.outbox = new Outbox(this);
    this.messages = new SqliteMessages(this);
    this.allotments = new SqliteAllotments(this);
  }

  // Row by row: on SQLite a statement is a library call in this process, not a round trip.
  writeBatch(batch: WriteBatch): Promise<void> {
    return writeBatchByRows(this, batch);
  }

  /**
   * Whether this transaction prepared a statement that writes (whether or not it went on to run or
   * succeed): what tells the substrate that a failed transaction left something to undo. Judged by
   * `readonly`, not `reader`: an UPDATE … RETURNING (the outbox claim) returns rows and writes.
   */
  wrote = false;

  finish(): void {
    this.#open = false;
  }

  /** Runs `sql` work, mapping driver errors to SubstrateError; other errors (bad input) pass unchanged. */
  exec<T>(action: string, work: (statement: (sql: string) => Database.Statement) => T): T {
    if (!this.#open) throw new SubstrateError("closed", `${action}: the transaction has already finished`);
    try {
      return work((sql) => {
        const statement = this.statements.get(sql);
        if (!statement.readonly) this.wrote = true;
        return statement;
      });
    } catch (error) {
      if (isDriverError(error)) throw toSubstrateError(error, action);
      throw error;
    }
  }
}

class Sessions implements SessionStore {
  constructor(readonly tx: SqliteTx) {}

  async get(sessionId: string): Promise<SessionRecord | null> {
    // The substrate holds the database write lock (BEGIN IMMEDIATE), so this row is locked already.
    const cached = this.tx.exec("sessions.get", () => this.tx.rows.sessions.get(sessionId));
    if (cached !== undefined) return rowToSession(cached);
    const row = this.tx.exec("sessions.get", (st) =>
      st("SELECT * FROM leash_sessions WHERE session_id = ?").get(sessionId),
    ) as SessionRow | undefined;
    if (row === undefined) return null;
    this.tx.rows.putSession(row);
    return rowToSession(row);
  }

  async insert(record: SessionRecord): Promise<void> {
    const row = sessionToRow(record);
    this.tx.exec("sessions.insert", (st) =>
      st(
        `INSERT INTO leash_sessions (session_id, agent_id, organization_id, status, config, state,
           call_count, created_ns, updated_ns, last_heartbeat_ns, at_seq)
         VALUES (@session_id, @agent_id, @organization_id, @status, @config, @state,
           @call_count, @created_ns, @updated_ns, @last_heartbeat_ns, @at_seq)`,
      ).run(row),
    );
    this.tx.rows.putSession(row);
  }

  async update(record: SessionRecord): Promise<void> {
    const row = sessionToRow(record);
    // Neither statement sets last_heartbeat_ns (SessionStore.update): only touch writes it.
    // Most updates keep status and created_ns (see DECISION_SQL); the full update below is the fallback.
    const kept = this.tx.exec("sessions.update", (st) =>
      st(DECISION_SQL.sessionUpdateKeepingStatus).run(row),
    );
    if (kept.changes === 0) {
      const { changes } = this.tx.exec("sessions.update", (st) =>
        st(
          `UPDATE leash_sessions SET agent_id = @agent_id, organization_id = @organization_id,
             status = @status, config = @config, state = @state, call_count = @call_count,
             created_ns = @created_ns, updated_ns = @updated_ns, at_seq = @at_seq
           WHERE session_id = @session_id`,
        ).run(row),
      );
      if (changes === 0) throw notFound("session", row.session_id);
    }
    // The cache holds the row as stored: with the stored heartbeat, when this connection knows it.
    const cached = this.tx.rows.sessions.get(row.session_id);
    if (cached === undefined) return;
    this.tx.rows.putSession({ ...row, last_heartbeat_ns: cached.last_heartbeat_ns });
  }

  async touch(sessionId: string, atNs: number): Promise<void> {
    const id = text("sessionId", sessionId);
    const at = checkedInteger("atNs", atNs);
    const { changes } = this.tx.exec("sessions.touch", (st) =>
      st("UPDATE leash_sessions SET last_heartbeat_ns = ? WHERE session_id = ?").run(at, id),
    );
    if (changes === 0) throw notFound("session", id);
    const cached = this.tx.rows.sessions.get(id);
    if (cached !== undefined) this.tx.rows.putSession({ ...cached, last_heartbeat_ns: at });
  }

  async list(filter: { status?: SessionStatus; limit?: number } = {}): Promise<SessionRecord[]> {
    const limit = limitOf(filter.limit);
    const rows = this.tx.exec("sessions.list", (st) =>
      filter.status === undefined
        ? st("SELECT * FROM leash_sessions ORDER BY created_ns, session_id LIMIT ?").all(limit)
        : st("SELECT * FROM leash_sessions WHERE status = ? ORDER BY created_ns, session_id LIMIT ?").all(
            filter.status,
            limit,
          ),
    ) as SessionRow[];
    return rows.map(rowToSession);
  }
}

/** Spent nonces, read from the chain's nonce column and the read-only leash_nonces (schema.ts, version 7). */
class Nonces implements NonceStore {
  constructor(readonly tx: SqliteTx) {}

  async has(sessionId: string, nonce: Nonce): Promise<boolean> {
    const key = encodeNonce(nonce);
    const row = this.tx.exec("nonces.has", (st) =>
      st(DECISION_SQL.nonceHas).get({ session_id: sessionId, nonce: key }),
    );
    return row !== undefined;
  }

  // One statement a pair: on SQLite each is a library call in this process, not a round trip.
  hasEach(pairs: ReadonlyArray<{ sessionId: string; nonce: Nonce }>): Promise<boolean[]> {
    return hasEachByOne(this, pairs);
  }

  async count(sessionId: string): Promise<number> {
    const row = this.tx.exec("nonces.count", (st) =>
      st(
        `SELECT (SELECT COUNT(*) FROM leash_chain WHERE session_id = @session_id AND nonce IS NOT NULL)
           + (SELECT COUNT(*) FROM leash_nonces WHERE session_id = @session_id) AS n`,
      ).get({ session_id: sessionId }),
    ) as { n: number };
    return row.n;
  }
}

class Budgets implements BudgetStore {
  constructor(readonly tx: SqliteTx) {}

  async getAccount(accountId: string): Promise<BudgetAccount | null> {
    const cached = this.tx.exec("budgets.getAccount", () => this.tx.rows.accounts.get(accountId));
    if (cached !== undefined) return rowToAccount(cached);
    const row = this.tx.exec("budgets.getAccount", (st) =>
      st("SELECT * FROM leash_budget_accounts WHERE account_id = ?").get(accountId),
    ) as AccountRow | undefined;
    if (row === undefined) return null;
    this.tx.rows.putAccount(row);
    return rowToAccount(row);
  }

  async insertAccount(account: BudgetAccount): Promise<void> {
    const row = accountToRow(account);
    this.tx.exec("budgets.insertAccount", (st) =>
      st(
        `INSERT INTO leash_budget_accounts (account_id, scope, parent_id, limit_usd, spent_usd,
           reserved_usd, created_ns, updated_ns, at_seq)
         VALUES (@account_id, @scope, @parent_id, @limit_usd, @spent_usd, @reserved_usd,
           @created_ns, @updated_ns, @at_seq)`,
      ).run(row),
    );
    this.tx.rows.putAccount(row);
  }

  async updateAccount(account: BudgetAccount): Promise<void> {
    const row = accountToRow(account);
    const { changes } = this.tx.exec("budgets.updateAccount", (st) =>
      st(DECISION_SQL.accountUpdate).run(row),
    );
    if (changes === 0) throw notFound("budget account", row.account_id);
    this.tx.rows.putAccount(row);
  }

  async insertReservation(reservation: Reservation): Promise<void> {
    const row = reservationToRow(reservation);
    this.tx.exec("budgets.insertReservation", (st) => st(DECISION_SQL.reservationInsert).run(row));
  }

  async getReservation(reservationId: string): Promise<Reservation | null> {
    const row = this.tx.exec("budgets.getReservation", (st) =>
      st("SELECT * FROM leash_reservations WHERE reservation_id = ?").get(reservationId),
    ) as ReservationRow | undefined;
    return row === undefined ? null : rowToReservation(row);
  }

  async updateReservation(reservation: Reservation): Promise<void> {
    const row = reservationToRow(reservation);
    const { changes } = this.tx.exec("budgets.updateReservation", (st) =>
      st(
        `UPDATE leash_reservations SET account_ids = @account_ids, session_id = @session_id,
           call_number = @call_number, amount_usd = @amount_usd, actual_usd = @actual_usd,
           status = @status, idempotency_key = @idempotency_key, created_ns = @created_ns,
           expires_ns = @expires_ns, resolved_ns = @resolved_ns, at_seq = @at_seq
         WHERE reservation_id = @reservation_id`,
      ).run(row),
    );
    if (changes === 0) throw notFound("reservation", row.reservation_id);
  }

  async listExpired(nowNs: number, limit: number): Promise<Reservation[]> {
    const now = checkedInteger("nowNs", nowNs);
    const max = limitOf(limit);
    // The literal 'PENDING' lets SQLite use the partial index on pending reservations.
    const rows = this.tx.exec("budgets.listExpired", (st) =>
      st(
        `SELECT * FROM leash_reservations WHERE status = 'PENDING' AND expires_ns <= ?
         ORDER BY expires_ns, created_ns, reservation_id LIMIT ?`,
      ).all(now, max),
    ) as ReservationRow[];
    return rows.map(rowToReservation);
  }

  async listReservations(filter: { sessionId?: string; status?: ReservationStatus }): Promise<Reservation[]> {
    const { sql, params } = filtered(
      "leash_reservations",
      { session_id: filter.sessionId, status: filter.status },
      "created_ns, reservation_id",
    );
    const rows = this.tx.exec("budgets.listReservations", (st) => st(sql).all(...params)) as ReservationRow[];
    return rows.map(rowToReservation);
  }
}

class Hitl implements HitlStore {
  constructor(readonly tx: SqliteTx) {}

  async insert(request: HitlRequest): Promise<void> {
    const row = hitlToRow(request);
    this.tx.exec("hitl.insert", (st) =>
      st(
        `INSERT INTO leash_hitl_requests (request_id, session_id, call_number, tool_name, nonce,
           args_digest, reason, status, decision, operator_id, successor_nonce, successor_args_digest,
           created_ns, decided_ns, params_json, budget_spent_usd, budget_limit_usd, budget_remaining_usd,
           policy_id, expires_ns, comment, successor_params_json, at_seq)
         VALUES (@request_id, @session_id, @call_number, @tool_name, @nonce, @args_digest, @reason,
           @status, @decision, @operator_id, @successor_nonce, @successor_args_digest, @created_ns,
           @decided_ns, @params_json, @budget_spent_usd, @budget_limit_usd, @budget_remaining_usd,
           @policy_id, @expires_ns, @comment, @successor_params_json, @at_seq)`,
      ).run(row),
    );
  }

  async get(requestId: string): Promise<HitlRequest | null> {
    const row = this.tx.exec("hitl.get", (st) =>
      st("SELECT * FROM leash_hitl_requests WHERE request_id = ?").get(requestId),
    ) as HitlRow | undefined;
    return row === undefined ? null : rowToHitl(row);
  }

  async update(request: HitlRequest): Promise<void> {
    const row = hitlToRow(request);
    const { changes } = this.tx.exec("hitl.update", (st) =>
      st(
        `UPDATE leash_hitl_requests SET session_id = @session_id, call_number = @call_number,
           tool_name = @tool_name, nonce = @nonce, args_digest = @args_digest, reason = @reason,
           status = @status, decision = @decision, operator_id = @operator_id,
           successor_nonce = @successor_nonce, successor_args_digest = @successor_args_digest,
           created_ns = @created_ns, decided_ns = @decided_ns, params_json = @params_json,
           budget_spent_usd = @budget_spent_usd, budget_limit_usd = @budget_limit_usd,
           budget_remaining_usd = @budget_remaining_usd, policy_id = @policy_id, expires_ns = @expires_ns,
           comment = @comment, successor_params_json = @successor_params_json, at_seq = @at_seq
         WHERE request_id = @request_id`,
      ).run(row),
    );
    if (changes === 0) throw notFound("HITL request", row.request_id);
  }

  async list(filter: { sessionId?: string; status?: HitlRequestStatus }): Promise<HitlRequest[]> {
    const { sql, params } = filtered(
      "leash_hitl_requests",
      { session_id: filter.sessionId, status: filter.status },
      "created_ns, request_id",
    );
    const rows = this.tx.exec("hitl.list", (st) => st(sql).all(...params)) as HitlRow[];
    return rows.map(rowToHitl);
  }
}

const CHAIN_HEAD = "SELECT seq, entry_hash FROM leash_chain ORDER BY seq DESC LIMIT 1";

class Chain implements ChainStore {
  constructor(readonly tx: SqliteTx) {}

  async head(): Promise<{ seq: number; entry_hash: string } | null> {
    // The transaction holds the database write lock (BEGIN IMMEDIATE) from its start, so no other
    // connection can append until it ends: the head is locked without asking.
    const head = this.tx.exec("chain.head", (st) => this.#head(st));
    return head === null ? null : { ...head };
  }

  /** The head, from the row cache when this connection already knows it. */
  #head(st: (sql: string) => Database.Statement): HeadRow {
    if (this.tx.rows.head !== undefined) return this.tx.rows.head;
    const row = st(CHAIN_HEAD).get() as { seq: number; entry_hash: string } | undefined;
    const head = row === undefined ? null : { seq: row.seq, entry_hash: row.entry_hash };
    this.tx.rows.head = head;
    return head;
  }

  async append(entry: ChainEntryRecord): Promise<void> {
    const row = chainToRow(entry);
    this.tx.exec("chain.append", (st) => {
      const headSeq = this.#head(st)?.seq ?? -1;
      // Only the next seq: an earlier one is taken, a later one would leave a gap in the chain.
      if (row.seq !== headSeq + 1) throw chainConflict(row.seq, headSeq);
      const { changes } = st(DECISION_SQL.chainInsert).run(row);
      if (changes === 0) {
        const spent =
          row.nonce !== null &&
          st(DECISION_SQL.nonceHas).get({ session_id: row.session_id, nonce: row.nonce }) !== undefined;
        throw new SubstrateError(
          "conflict",
          spent
            ? `nonce ${JSON.stringify(entry.nonce)} (${typeof entry.nonce}) is already spent in session ${JSON.stringify(row.session_id)}`
            : `chain entry ${JSON.stringify(row.entry_id)} already exists`,
        );
      }
      this.tx.rows.head = { seq: row.seq, entry_hash: row.entry_hash };
      // A digest already stored keeps its text: the same params of another entry are the same text.
      if (entry.params !== undefined) {
        st("INSERT INTO leash_params (hash, text) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING").run(
          text("params.hash", entry.params.hash),
          text("params.text", entry.params.text),
        );
      }
    });
  }

  async params(hashes: readonly string[]): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    this.tx.exec("chain.params", (st) => {
      const read = st("SELECT text FROM leash_params WHERE hash = ?");
      for (const hash of hashes) {
        const row = read.get(text("hash", hash)) as { text: string } | undefined;
        if (row !== undefined) found.set(hash, row.text);
      }
    });
    return found;
  }

  async range(fromSeq: number, limit: number): Promise<ChainEntryRecord[]> {
    const from = checkedInteger("fromSeq", fromSeq);
    const max = limitOf(limit);
    const rows = this.tx.exec("chain.range", (st) =>
      st("SELECT * FROM leash_chain WHERE seq >= ? ORDER BY seq LIMIT ?").all(from, max),
    ) as ChainRow[];
    return rows.map(rowToChain);
  }

  async count(): Promise<number> {
    const row = this.tx.exec("chain.count", (st) => st("SELECT COUNT(*) AS n FROM leash_chain").get()) as {
      n: number;
    };
    return row.n;
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

/** SELECT with an equality per defined filter; at most four SQL texts per table, so the cache stays small. */
function filtered(
  table: string,
  equal: Record<string, string | undefined>,
  orderBy: string,
): { sql: string; params: string[] } {
  const where: string[] = [];
  const params: string[] = [];
  for (const [column, value] of Object.entries(equal)) {
    if (value === undefined) continue;
    where.push(`${column} = ?`);
    params.push(value);
  }
  const clause = where.length === 0 ? "" : ` WHERE ${where.join(" AND ")}`;
  return { sql: `SELECT * FROM ${table}${clause} ORDER BY ${orderBy}`, params };
}
