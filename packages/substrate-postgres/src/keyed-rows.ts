// Rows keyed by one text id (reservations, HITL requests): insert, lock-and-read, update and listing by
// session and status, remembering which ids this transaction holds. It knows no table: statements and codecs come in.
import { SubstrateError } from "@leash/core";
import type { QueryResultRow } from "pg";
import { encodeText } from "./codec.js";
import type { Statement } from "./sql.js";
import type { TxContext } from "./tx.js";

export interface KeyedRowsSpec<T, Row extends QueryResultRow> {
  /** The table's name in row keys ("reservations", "hitl"). */
  readonly table: string;
  /** How messages name a row: "reservation", "HITL request". */
  readonly noun: string;
  /** The id's column, for the message about a malformed id. */
  readonly idColumn: string;
  readonly idOf: (record: T) => string;
  /** Encodes (and so validates) a record as the insert and update statements' parameters, id first. */
  readonly params: (record: T) => unknown[];
  readonly fromRow: (row: Row) => T;
  readonly statements: {
    readonly get: Statement;
    readonly insert: Statement;
    readonly update: Statement;
    readonly list: (used: readonly string[]) => Statement;
  };
}

export class KeyedRows<T, Row extends QueryResultRow> {
  /** Ids this transaction knows exist and has locked (read FOR UPDATE, or inserted) until it ends. */
  readonly #held = new Set<string>();
  /** Ids this transaction found absent under their key lock: an insert of one cannot conflict. */
  readonly #absent = new Set<string>();

  constructor(
    private readonly tx: TxContext,
    private readonly spec: KeyedRowsSpec<T, Row>,
  ) {}

  /**
   * An id this transaction found absent under its key lock is inserted without waiting for the
   * answer (see TxContext.defer): the lock keeps it absent, so the insert cannot clash, and its
   * answer is still checked before COMMIT. The insert takes the key lock all the same, so a
   * concurrent insert of the same id waits for this one's outcome.
   */
  async insert(record: T): Promise<void> {
    const { spec, tx } = this;
    const id = spec.idOf(record);
    if (this.#absent.has(id)) return this.insertHeld(record);
    const { rowCount } = await tx.query(spec.statements.insert, this.#insertParams(record, id));
    if (rowCount === 0) throw this.#taken(id);
    this.#held.add(id);
  }

  /**
   * Inserts without waiting for the answer, whatever this transaction knows of the id: for an id
   * found absent under its key lock (insert), or a row of SubstrateTx.writeBatch, which waits for
   * every answer before it resolves. A clash, checked in the answer, fails the transaction.
   */
  insertHeld(record: T): Promise<void> {
    const id = this.spec.idOf(record);
    this.#absent.delete(id);
    this.#held.add(id);
    return this.tx.defer(this.spec.statements.insert, this.#insertParams(record, id), (r) =>
      r.rowCount === 0 ? this.#taken(id) : null,
    );
  }

  /** The insert's parameters: the row's, then the key its lock is taken on. */
  #insertParams(record: T, id: string): unknown[] {
    return [...this.spec.params(record), this.tx.rowKey(this.spec.table, id)];
  }

  #taken(id: string): SubstrateError {
    return new SubstrateError("conflict", `${this.spec.noun} ${id} already exists`);
  }

  async get(rawId: string): Promise<T | null> {
    const id = encodeText(rawId, this.spec.idColumn);
    const row = await this.tx.lockedRow<Row>(this.spec.statements.get, id, this.spec.table);
    if (row === undefined) {
      this.#absent.add(id);
      return null;
    }
    this.#held.add(id);
    return this.spec.fromRow(row);
  }

  /** A row this transaction holds is updated without waiting for the answer (its lock settles it). */
  async update(record: T): Promise<void> {
    const { spec, tx } = this;
    const params = spec.params(record);
    const id = spec.idOf(record);
    const missing = () => new SubstrateError("not_found", `${spec.noun} ${id} does not exist`);
    if (this.#held.has(id)) {
      return tx.defer(spec.statements.update, params, (r) => (r.rowCount === 0 ? missing() : null));
    }
    const { rowCount } = await tx.query(spec.statements.update, params);
    if (rowCount === 0) throw missing();
  }

  async list(filter: { sessionId?: string; status?: string }): Promise<T[]> {
    const used: string[] = [];
    const values: unknown[] = [];
    if (filter.sessionId !== undefined) {
      used.push("session_id");
      values.push(encodeText(filter.sessionId, "sessionId"));
    }
    if (filter.status !== undefined) {
      used.push("status");
      values.push(encodeText(filter.status, "status"));
    }
    const { rows } = await this.tx.query<Row>(this.spec.statements.list(used), values);
    return rows.map(this.spec.fromRow);
  }
}
