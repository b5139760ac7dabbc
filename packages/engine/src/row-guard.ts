// One transaction's side of state-auth.ts: the rows it changed since its last entry (named by the next
// one, stamped with its seq) and the checks of the rows it reads. It signs nothing and decides nothing.
import { rowDigest, rowKey, type StateTable } from "@leash/chain";
import type { HitlStore, Reservation, SubstrateTx } from "@leash/core";
import type { StateAuth } from "./state-auth.js";

type Stamped = { at_seq?: number | null };
type Undo = () => void;

/** One row a transaction changed since its last entry, and how to read it as it stands now. */
export interface Changed {
  table: StateTable;
  id: string;
  /** The row as it stands; `stamp` (rows held in memory) moves its stamp to the entry's seq. */
  current(): Stamped | undefined;
  stamp?(seq: number): void;
}

/**
 * The rows one transaction changed since its last entry (to be named by the next one), and every
 * row it wrote (served without a check: it wrote them itself).
 */
export class RowStamps {
  #changed = new Map<string, Changed>();
  readonly #written = new Set<string>();

  constructor(private readonly journal: (undo: () => void) => void) {}

  /** Records a change; the next entry names the row's digest. */
  changed(change: Changed): void {
    const key = rowKey(change.table, change.id);
    const before = this.#changed.get(key);
    const wasWritten = this.#written.has(key);
    this.journal(() => {
      if (before === undefined) this.#changed.delete(key);
      else this.#changed.set(key, before);
      if (!wasWritten) this.#written.delete(key);
    });
    this.#changed.set(key, change);
    this.#written.add(key);
  }

  wrote(table: StateTable, id: string): boolean {
    return this.#written.has(rowKey(table, id));
  }

  /** Rows changed and not yet named by an entry. */
  get pending(): number {
    return this.#changed.size;
  }

  /**
   * The `row_digests` of the entry at `seq`: every row changed since the last entry, stamped with
   * `seq`. Undefined when none changed.
   */
  take(seq: number): Record<string, string> | undefined {
    if (this.#changed.size === 0) return undefined;
    const taken = this.#changed;
    this.#changed = new Map();
    this.journal(() => {
      this.#changed = taken;
    });
    const digests: Record<string, string> = {};
    for (const [key, change] of taken) {
      change.stamp?.(seq);
      const row = change.current();
      if (row === undefined) continue;
      if (row.at_seq !== seq) {
        throw new TypeError(
          `${key} was written stamped ${row.at_seq}, but the entry that names it is ${seq}`,
        );
      }
      digests[key] = rowDigest(change.table, row);
    }
    return digests;
  }
}

/** A row held in a RowOverlay (projection.ts): read at the entry, and stamped with its seq there. */
export function overlaid(
  table: StateTable,
  id: string,
  rows: { current(id: string): Stamped | undefined; stamp(id: string, seq: number): void },
): Changed {
  return { table, id, current: () => rows.current(id), stamp: (seq) => rows.stamp(id, seq) };
}

type Send = <T>(send: () => Promise<T>) => Promise<T>;

/** The checks and stamps of one transaction (ProjectionTx), over its store `tx`. */
export class RowGuard {
  readonly stamps: RowStamps;

  /**
   * @param openSeq the head's seq when the transaction opened (entries up to it are committed)
   * @param nextSeq the seq the transaction's next entry takes
   */
  constructor(
    private readonly auth: StateAuth | undefined,
    private readonly tx: SubstrateTx,
    journal: (undo: Undo) => void,
    private readonly openSeq: () => number,
    private readonly nextSeq: () => number,
  ) {
    this.stamps = new RowStamps(journal);
  }

  /**
   * A row read from the store, once the chain vouches for it. Rows this transaction wrote are its
   * own; escrow's accounts change without an entry (SubstrateTx.volatileAccounts): served as read.
   */
  checked<R extends Stamped>(table: StateTable, id: string, row: R | null): R | null | Promise<R | null> {
    const { auth, tx } = this;
    if (auth === undefined || this.stamps.wrote(table, id)) return row;
    if (table === "budget_accounts" && tx.volatileAccounts?.has(id)) return row;
    return auth.check(tx, table, id, row, this.openSeq());
  }

  async checkedAll<R extends Stamped>(table: StateTable, idOf: (row: R) => string, rows: R[]): Promise<R[]> {
    for (const row of rows) await this.checked(table, idOf(row), row);
    return rows;
  }

  /** A row written straight to the store, stamped with the entry that follows (which names it). */
  stamped<R extends object>(table: StateTable, id: string, row: R): R & { at_seq: number } {
    const out = { ...row, at_seq: this.nextSeq() };
    this.stamps.changed({ table, id, current: () => out });
    return out;
  }

  /** The HITL store of the transaction: writes stamped, reads checked. */
  hitl(read: Send, write: Send): HitlStore {
    const hitl = this.tx.hitl;
    return {
      insert: (request) =>
        write(() => hitl.insert(this.stamped("hitl_requests", request.request_id, request))),
      get: (id) => read(() => hitl.get(id)).then((row) => this.checked("hitl_requests", id, row)),
      update: (request) =>
        write(() => hitl.update(this.stamped("hitl_requests", request.request_id, request))),
      list: (filter) =>
        read(() => hitl.list(filter)).then((rows) =>
          this.checkedAll("hitl_requests", (r) => r.request_id, rows),
        ),
    };
  }

  /** The holds of the transaction's BudgetStore, but their inserts (held: ProjectionTx.holdNow). */
  holds(read: Send, write: Send) {
    const budgets = this.tx.budgets;
    const all = (rows: Reservation[]) => this.checkedAll("reservations", (r) => r.reservation_id, rows);
    return {
      getReservation: (id: string) =>
        read(() => budgets.getReservation(id)).then((row) => this.checked("reservations", id, row)),
      updateReservation: (reservation: Reservation) =>
        write(() =>
          budgets.updateReservation(this.stamped("reservations", reservation.reservation_id, reservation)),
        ),
      listExpired: (nowNs: number, limit: number) => read(() => budgets.listExpired(nowNs, limit)).then(all),
      listReservations: (filter: Parameters<SubstrateTx["budgets"]["listReservations"]>[0]) =>
        read(() => budgets.listReservations(filter)).then(all),
    };
  }
}
