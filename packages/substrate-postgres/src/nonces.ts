// The nonce store on leash_nonces: one row per (session, nonce), the primary key doing the refusing.
// It keeps no copy of nonces in session state; `add` is the only place a nonce is accepted.
import type { Nonce, NonceStore } from "@leash/core";
import { decodeInt, encodeInt, encodeNonce, encodeText } from "./codec.js";
import type { Statements } from "./sql.js";
import type { TxContext } from "./tx.js";

export class PostgresNonceStore implements NonceStore {
  constructor(
    private readonly tx: TxContext,
    private readonly sql: Statements["nonces"],
  ) {}

  async has(sessionId: string, nonce: Nonce): Promise<boolean> {
    const { rowCount } = await this.tx.query(this.sql.has, [
      encodeText(sessionId, "session_id"),
      encodeNonce(nonce),
    ]);
    return rowCount !== null && rowCount > 0;
  }

  async add(sessionId: string, nonce: Nonce, atNs: number): Promise<boolean> {
    // A racing transaction holding the same key makes this wait for its outcome: it either
    // commits (we insert nothing and answer false) or rolls back (we insert and answer true).
    const { rowCount } = await this.tx.query(this.sql.add, [
      encodeText(sessionId, "session_id"),
      encodeNonce(nonce),
      encodeInt(atNs, "atNs"),
    ]);
    return rowCount === 1;
  }

  async count(sessionId: string): Promise<number> {
    const { rows } = await this.tx.query<{ count: unknown }>(this.sql.count, [
      encodeText(sessionId, "session_id"),
    ]);
    return decodeInt(rows[0]?.count ?? 0, "count");
  }
}
