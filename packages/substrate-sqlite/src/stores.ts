// The four stores a SQLite transaction hands out, over prepared statements cached per connection.
// They run inside a transaction the substrate opened; they never BEGIN, COMMIT or lock by themselves.

import type {
  BudgetAccount,
  BudgetStore,
  HitlRequest,
  HitlRequestStatus,
  HitlStore,
  Nonce,
  NonceStore,
  Reservation,
  ReservationStatus,
  SessionRecord,
  SessionStatus,
  SessionStore,
  SubstrateTx,
} from "@leash/core";
import { SubstrateError } from "@leash/core";
import type Database from "better-sqlite3";
import {
  type AccountRow,
  accountToRow,
  checkedInteger,
  encodeNonce,
  type HitlRow,
  hitlToRow,
  type ReservationRow,
  reservationToRow,
  rowToAccount,
  rowToHitl,
  rowToReservation,
  rowToSession,
  type SessionRow,
  sessionToRow,
} from "./codec.js";
import { isDriverError, toSubstrateError } from "./errors.js";

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

  constructor(readonly statements: StatementCache) {
    this.sessions = new Sessions(this);
    this.nonces = new Nonces(this);
    this.budgets = new Budgets(this);
    this.hitl = new Hitl(this);
  }

  finish(): void {
    this.#open = false;
  }

  /** Runs `sql` work, mapping driver errors to SubstrateError; other errors (bad input) pass unchanged. */
  exec<T>(action: string, work: (statement: (sql: string) => Database.Statement) => T): T {
    if (!this.#open) throw new SubstrateError("closed", `${action}: the transaction has already finished`);
    try {
      return work((sql) => this.statements.get(sql));
    } catch (error) {
      if (isDriverError(error)) throw toSubstrateError(error, action);
      throw error;
    }
  }
}

function notFound(what: string, id: string): SubstrateError {
  return new SubstrateError("not_found", `${what} ${JSON.stringify(id)} does not exist`);
}

function limitOf(limit: number | undefined): number {
  // SQLite reads a negative LIMIT as "no limit".
  return limit === undefined ? -1 : checkedInteger("limit", limit) < 0 ? 0 : limit;
}

class Sessions implements SessionStore {
  constructor(readonly tx: SqliteTx) {}

  async get(sessionId: string): Promise<SessionRecord | null> {
    // The substrate holds the database write lock (BEGIN IMMEDIATE), so this row is locked already.
    const row = this.tx.exec("sessions.get", (st) =>
      st("SELECT * FROM leash_sessions WHERE session_id = ?").get(sessionId),
    ) as SessionRow | undefined;
    return row === undefined ? null : rowToSession(row);
  }

  async insert(record: SessionRecord): Promise<void> {
    const row = sessionToRow(record);
    this.tx.exec("sessions.insert", (st) =>
      st(
        `INSERT INTO leash_sessions (session_id, agent_id, organization_id, status, config, state,
           call_count, created_ns, updated_ns, last_heartbeat_ns)
         VALUES (@session_id, @agent_id, @organization_id, @status, @config, @state,
           @call_count, @created_ns, @updated_ns, @last_heartbeat_ns)`,
      ).run(row),
    );
  }

  async update(record: SessionRecord): Promise<void> {
    const row = sessionToRow(record);
    const { changes } = this.tx.exec("sessions.update", (st) =>
      st(
        `UPDATE leash_sessions SET agent_id = @agent_id, organization_id = @organization_id,
           status = @status, config = @config, state = @state, call_count = @call_count,
           created_ns = @created_ns, updated_ns = @updated_ns, last_heartbeat_ns = @last_heartbeat_ns
         WHERE session_id = @session_id`,
      ).run(row),
    );
    if (changes === 0) throw notFound("session", row.session_id);
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

class Nonces implements NonceStore {
  constructor(readonly tx: SqliteTx) {}

  async has(sessionId: string, nonce: Nonce): Promise<boolean> {
    const key = encodeNonce(nonce);
    const row = this.tx.exec("nonces.has", (st) =>
      st("SELECT 1 FROM leash_nonces WHERE session_id = ? AND nonce = ?").get(sessionId, key),
    );
    return row !== undefined;
  }

  async add(sessionId: string, nonce: Nonce, atNs: number): Promise<boolean> {
    const key = encodeNonce(nonce);
    const at = checkedInteger("atNs", atNs);
    // DO NOTHING rather than catching a constraint error: a repeat is an answer (false), not a failure.
    const { changes } = this.tx.exec("nonces.add", (st) =>
      st(
        "INSERT INTO leash_nonces (session_id, nonce, recorded_ns) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
      ).run(sessionId, key, at),
    );
    return changes === 1;
  }

  async count(sessionId: string): Promise<number> {
    const row = this.tx.exec("nonces.count", (st) =>
      st("SELECT COUNT(*) AS n FROM leash_nonces WHERE session_id = ?").get(sessionId),
    ) as { n: number };
    return row.n;
  }
}

class Budgets implements BudgetStore {
  constructor(readonly tx: SqliteTx) {}

  async getAccount(accountId: string): Promise<BudgetAccount | null> {
    const row = this.tx.exec("budgets.getAccount", (st) =>
      st("SELECT * FROM leash_budget_accounts WHERE account_id = ?").get(accountId),
    ) as AccountRow | undefined;
    return row === undefined ? null : rowToAccount(row);
  }

  async insertAccount(account: BudgetAccount): Promise<void> {
    const row = accountToRow(account);
    this.tx.exec("budgets.insertAccount", (st) =>
      st(
        `INSERT INTO leash_budget_accounts (account_id, scope, parent_id, limit_usd, spent_usd,
           reserved_usd, created_ns, updated_ns)
         VALUES (@account_id, @scope, @parent_id, @limit_usd, @spent_usd, @reserved_usd,
           @created_ns, @updated_ns)`,
      ).run(row),
    );
  }

  async updateAccount(account: BudgetAccount): Promise<void> {
    const row = accountToRow(account);
    const { changes } = this.tx.exec("budgets.updateAccount", (st) =>
      st(
        `UPDATE leash_budget_accounts SET scope = @scope, parent_id = @parent_id, limit_usd = @limit_usd,
           spent_usd = @spent_usd, reserved_usd = @reserved_usd, created_ns = @created_ns,
           updated_ns = @updated_ns
         WHERE account_id = @account_id`,
      ).run(row),
    );
    if (changes === 0) throw notFound("budget account", row.account_id);
  }

  async insertReservation(reservation: Reservation): Promise<void> {
    const row = reservationToRow(reservation);
    this.tx.exec("budgets.insertReservation", (st) =>
      st(
        `INSERT INTO leash_reservations (reservation_id, account_ids, session_id, call_number,
           amount_usd, actual_usd, status, idempotency_key, created_ns, expires_ns, resolved_ns)
         VALUES (@reservation_id, @account_ids, @session_id, @call_number, @amount_usd, @actual_usd,
           @status, @idempotency_key, @created_ns, @expires_ns, @resolved_ns)`,
      ).run(row),
    );
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
           expires_ns = @expires_ns, resolved_ns = @resolved_ns
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
           created_ns, decided_ns)
         VALUES (@request_id, @session_id, @call_number, @tool_name, @nonce, @args_digest, @reason,
           @status, @decision, @operator_id, @successor_nonce, @successor_args_digest, @created_ns,
           @decided_ns)`,
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
           created_ns = @created_ns, decided_ns = @decided_ns
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
