// The budget accounts and holds a replay folds the chain into: a BudgetStore over two Maps, so the
// replay runs @leash/budget-guard's own arithmetic (reserve, settle, expire). No locks, no I/O.
import type { BudgetAccount, BudgetStore, Reservation, ReservationStatus } from "@leash/core";

export class ReplayLedger implements BudgetStore {
  readonly accounts = new Map<string, BudgetAccount>();
  readonly reservations = new Map<string, Reservation>();
  /** When set, listExpired answers this one hold alone (a replayed reservation_expired or settled_by_expiry names it). */
  #expiring: string | null = null;

  async getAccount(accountId: string): Promise<BudgetAccount | null> {
    return this.accounts.get(accountId) ?? null;
  }
  async insertAccount(account: BudgetAccount): Promise<void> {
    this.accounts.set(account.account_id, account);
  }
  async updateAccount(account: BudgetAccount): Promise<void> {
    this.accounts.set(account.account_id, account);
  }
  async insertReservation(reservation: Reservation): Promise<void> {
    this.reservations.set(reservation.reservation_id, reservation);
  }
  async getReservation(reservationId: string): Promise<Reservation | null> {
    return this.reservations.get(reservationId) ?? null;
  }
  async updateReservation(reservation: Reservation): Promise<void> {
    this.reservations.set(reservation.reservation_id, reservation);
  }
  async listExpired(_nowNs: number, _limit: number): Promise<Reservation[]> {
    const hold = this.#expiring === null ? undefined : this.reservations.get(this.#expiring);
    return hold === undefined ? [] : [hold];
  }
  async listReservations(filter: { sessionId?: string; status?: ReservationStatus }): Promise<Reservation[]> {
    return [...this.reservations.values()].filter(
      (r) =>
        (filter.sessionId === undefined || r.session_id === filter.sessionId) &&
        (filter.status === undefined || r.status === filter.status),
    );
  }

  /** Runs `fn` with listExpired narrowed to one hold (budget-guard's expire then takes that one). */
  async expiring<T>(reservationId: string, fn: () => Promise<T>): Promise<T> {
    this.#expiring = reservationId;
    try {
      return await fn();
    } finally {
      this.#expiring = null;
    }
  }
}
