// The budget store on leash_budget_accounts and leash_reservations; money stays the exact text written.
// No arithmetic happens here: budget-guard decides amounts, this only locks, reads and writes rows.
import type {
  BudgetAccount,
  BudgetScopeKind,
  BudgetStore,
  Reservation,
  ReservationStatus,
} from "@leash/core";
import { SubstrateError } from "@leash/core";
import type { BatchMemory } from "./batch-memory.js";
import {
  decodeInt,
  decodeOptionalInt,
  encodeDecimal,
  encodeInt,
  encodeLimit,
  encodeOptionalDecimal,
  encodeOptionalInt,
  encodeOptionalText,
  encodeText,
} from "./codec.js";
import { KeyedRows } from "./keyed-rows.js";
import type { Statements } from "./sql.js";
import type { TxContext } from "./tx.js";

export interface AccountRow {
  account_id: string;
  scope: string;
  parent_id: string | null;
  limit_usd: string;
  spent_usd: string;
  reserved_usd: string;
  created_ns: unknown;
  updated_ns: unknown;
  at_seq: unknown;
}

interface ReservationRow {
  reservation_id: string;
  account_ids: string[];
  session_id: string;
  call_number: unknown;
  amount_usd: string;
  actual_usd: string | null;
  status: string;
  idempotency_key: string | null;
  created_ns: unknown;
  expires_ns: unknown;
  resolved_ns: unknown;
  at_seq: unknown;
}

export function accountFromRow(row: AccountRow): BudgetAccount {
  return {
    account_id: row.account_id,
    scope: row.scope as BudgetScopeKind,
    parent_id: row.parent_id,
    limit_usd: row.limit_usd,
    spent_usd: row.spent_usd,
    reserved_usd: row.reserved_usd,
    created_ns: decodeInt(row.created_ns, "created_ns"),
    updated_ns: decodeInt(row.updated_ns, "updated_ns"),
    at_seq: decodeOptionalInt(row.at_seq, "at_seq"),
  };
}

function accountParams(account: BudgetAccount): unknown[] {
  return [
    encodeText(account.account_id, "account_id"),
    encodeText(account.scope, "scope"),
    encodeOptionalText(account.parent_id, "parent_id"),
    encodeDecimal(account.limit_usd, "limit_usd"),
    encodeDecimal(account.spent_usd, "spent_usd"),
    encodeDecimal(account.reserved_usd, "reserved_usd"),
    encodeInt(account.created_ns, "created_ns"),
    encodeInt(account.updated_ns, "updated_ns"),
    encodeOptionalInt(account.at_seq, "at_seq"),
  ];
}

function reservationFromRow(row: ReservationRow): Reservation {
  return {
    reservation_id: row.reservation_id,
    account_ids: row.account_ids,
    session_id: row.session_id,
    call_number: decodeInt(row.call_number, "call_number"),
    amount_usd: row.amount_usd,
    actual_usd: row.actual_usd,
    status: row.status as ReservationStatus,
    idempotency_key: row.idempotency_key,
    created_ns: decodeInt(row.created_ns, "created_ns"),
    expires_ns: decodeInt(row.expires_ns, "expires_ns"),
    resolved_ns: decodeOptionalInt(row.resolved_ns, "resolved_ns"),
    // Absent, not null, for rows without a stamp: a record written without one reads back equal.
    ...(row.at_seq === null || row.at_seq === undefined ? {} : { at_seq: decodeInt(row.at_seq, "at_seq") }),
  };
}

function reservationParams(reservation: Reservation): unknown[] {
  if (!Array.isArray(reservation.account_ids)) {
    throw new SubstrateError("corrupt", "account_ids must be an array of account ids");
  }
  return [
    encodeText(reservation.reservation_id, "reservation_id"),
    reservation.account_ids.map((id) => encodeText(id, "account_ids[]")),
    encodeText(reservation.session_id, "session_id"),
    encodeInt(reservation.call_number, "call_number"),
    encodeDecimal(reservation.amount_usd, "amount_usd"),
    encodeOptionalDecimal(reservation.actual_usd, "actual_usd"),
    encodeText(reservation.status, "status"),
    encodeOptionalText(reservation.idempotency_key, "idempotency_key"),
    encodeInt(reservation.created_ns, "created_ns"),
    encodeInt(reservation.expires_ns, "expires_ns"),
    encodeOptionalInt(reservation.resolved_ns, "resolved_ns"),
    encodeOptionalInt(reservation.at_seq ?? null, "at_seq"),
  ];
}

const accountMissing = (account: BudgetAccount) =>
  new SubstrateError("not_found", `budget account ${account.account_id} does not exist`);

export class PostgresBudgetStore implements BudgetStore {
  /**
   * Account rows as this transaction last read them, locked (FOR UPDATE) until it ends: no one else
   * can change them, so reading one again (budget-guard reads an account for the remaining and again
   * to reserve) is answered from here. Any account write empties it.
   */
  private readonly known = new Map<string, BudgetAccount>();
  /** Bumped by every account write, so a read that raced a write is not remembered. */
  private accountWrites = 0;
  /** Accounts this transaction knows exist and has locked until it ends. */
  private readonly heldAccounts = new Set<string>();
  /** Account ids this transaction found absent under their key lock: an insert of one cannot conflict. */
  private readonly absentAccounts = new Set<string>();
  private readonly reservationRows: KeyedRows<Reservation, ReservationRow>;

  constructor(
    private readonly tx: TxContext,
    private readonly accounts: Statements["accounts"],
    private readonly reservations: Statements["reservations"],
    /** What earlier transactions of the same batch left locked and known (see BatchMemory). */
    memory?: BatchMemory,
  ) {
    this.reservationRows = new KeyedRows(tx, {
      table: "reservations",
      noun: "reservation",
      idColumn: "reservation_id",
      idOf: (reservation) => reservation.reservation_id,
      params: reservationParams,
      fromRow: reservationFromRow,
      statements: reservations,
    });
    if (memory === undefined) return;
    for (const [id, account] of memory.accounts) this.known.set(id, { ...account });
    for (const id of memory.heldAccounts) this.heldAccounts.add(id);
  }

  /** Hands what this transaction knows to the batch, once its savepoint has been released. */
  rememberIn(memory: BatchMemory): void {
    for (const id of this.heldAccounts) memory.heldAccounts.add(id);
    memory.accounts.clear();
    for (const [id, account] of this.known) memory.accounts.set(id, { ...account });
  }

  async getAccount(accountId: string): Promise<BudgetAccount | null> {
    const id = encodeText(accountId, "account_id");
    const known = this.known.get(id);
    if (known !== undefined) {
      await this.tx.usable("accounts.get");
      return { ...known };
    }
    const writes = this.accountWrites;
    const row = await this.tx.lockedRow<AccountRow>(this.accounts.get, id, "accounts");
    if (row === undefined) {
      this.absentAccounts.add(id);
      return null;
    }
    this.heldAccounts.add(id);
    const account = accountFromRow(row);
    if (writes === this.accountWrites) this.known.set(id, { ...account });
    return account;
  }

  async insertAccount(account: BudgetAccount): Promise<void> {
    const key = this.tx.rowKey("accounts", account.account_id);
    const params = [...accountParams(account), key];
    this.accountWrites++;
    this.known.clear();
    const id = account.account_id;
    const conflict = () => new SubstrateError("conflict", `budget account ${id} already exists`);
    if (this.absentAccounts.delete(id)) {
      this.heldAccounts.add(id);
      return this.tx.defer(this.accounts.insert, params, (r) => (r.rowCount === 0 ? conflict() : null));
    }
    const { rowCount } = await this.tx.query(this.accounts.insert, params);
    if (rowCount === 0) throw conflict();
    this.heldAccounts.add(id);
  }

  async updateAccount(account: BudgetAccount): Promise<void> {
    const params = accountParams(account);
    this.accountWrites++;
    this.known.clear();
    if (this.heldAccounts.has(account.account_id)) return this.#updateHeld(account, params);
    const { rowCount } = await this.tx.query(this.accounts.update, params);
    if (rowCount === 0) throw accountMissing(account);
  }

  /**
   * Updates without waiting for the answer, whatever this transaction knows of the row: a row it
   * holds locked (updateAccount), or one of SubstrateTx.writeBatch, which waits for every answer
   * before it resolves. A missing row, checked in the answer, fails the transaction.
   */
  updateAccountHeld(account: BudgetAccount): Promise<void> {
    this.accountWrites++;
    this.known.clear();
    return this.#updateHeld(account, accountParams(account));
  }

  async #updateHeld(account: BudgetAccount, params: unknown[]): Promise<void> {
    await this.tx.defer(this.accounts.update, params, (r) =>
      r.rowCount === 0 ? accountMissing(account) : null,
    );
    // Locked by this transaction, the row now holds exactly what was written (money is stored as
    // the text given); should the write fail, so does the transaction, and this is forgotten.
    this.heldAccounts.add(account.account_id);
    this.known.set(account.account_id, { ...account, at_seq: account.at_seq ?? null });
  }

  insertReservation(reservation: Reservation): Promise<void> {
    return this.reservationRows.insert(reservation);
  }

  /** A hold of SubstrateTx.writeBatch: inserted without waiting (KeyedRows.insertHeld). */
  insertReservationHeld(reservation: Reservation): Promise<void> {
    return this.reservationRows.insertHeld(reservation);
  }

  getReservation(reservationId: string): Promise<Reservation | null> {
    return this.reservationRows.get(reservationId);
  }

  updateReservation(reservation: Reservation): Promise<void> {
    return this.reservationRows.update(reservation);
  }

  async listExpired(nowNs: number, limit: number): Promise<Reservation[]> {
    const { rows } = await this.tx.query<ReservationRow>(this.reservations.listExpired, [
      encodeInt(nowNs, "nowNs"),
      encodeLimit(limit),
    ]);
    return rows.map(reservationFromRow);
  }

  listReservations(filter: { sessionId?: string; status?: ReservationStatus }): Promise<Reservation[]> {
    return this.reservationRows.list(filter);
  }
}
