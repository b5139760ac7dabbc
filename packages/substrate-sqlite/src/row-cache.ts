// Rows this connection last read or wrote under the write lock (sessions, budget accounts, the chain
// head), so a batch of decisions does not read back what it just wrote. Not a cache of anything else.

import type { AccountRow, SessionRow } from "./codec.js";

/** A map past this size is dropped rather than grown: the hot rows of a busy store come back at once. */
const MAX_ROWS = 4096;

export type HeadRow = { seq: number; entry_hash: string } | null;

/**
 * Valid only while nothing else can have written the file since the rows were cached. The substrate
 * keeps that true: it calls `checkDataVersion` after every BEGIN IMMEDIATE (another connection's
 * commit changes PRAGMA data_version) and `clear` whenever a statement or a transaction rolls back,
 * since a rolled-back write may be cached already.
 */
export class RowCache {
  readonly sessions = new Map<string, SessionRow>();
  readonly accounts = new Map<string, AccountRow>();
  /** The chain head; undefined when unknown (an empty chain is a known null). */
  head: HeadRow | undefined = undefined;
  #dataVersion: number | undefined;

  /** Forgets everything when another connection has committed since the last check. */
  checkDataVersion(version: number): void {
    if (version !== this.#dataVersion) this.clear();
    this.#dataVersion = version;
  }

  clear(): void {
    this.sessions.clear();
    this.accounts.clear();
    this.head = undefined;
  }

  putSession(row: SessionRow): void {
    if (this.sessions.size >= MAX_ROWS && !this.sessions.has(row.session_id)) this.sessions.clear();
    this.sessions.set(row.session_id, row);
  }

  putAccount(row: AccountRow): void {
    if (this.accounts.size >= MAX_ROWS && !this.accounts.has(row.account_id)) this.accounts.clear();
    this.accounts.set(row.account_id, row);
  }
}
