// The nonce store on leash_nonces: one row per (session, nonce), the primary key doing the refusing.
// It keeps no copy of nonces in session state; `add` is the only place a nonce is accepted.
import type { Nonce, NonceStore } from "@leash/core";
import { SubstrateError } from "@leash/core";
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

  /**
   * With `unseen` (the caller found the nonce absent under the session row's lock) the insert is
   * sent without waiting for its answer (see TxContext.defer) and this resolves true: should the
   * nonce be recorded after all, the transaction still fails with "conflict" before it commits.
   */
  async add(sessionId: string, nonce: Nonce, atNs: number, options?: { unseen?: boolean }): Promise<boolean> {
    const params = [encodeText(sessionId, "session_id"), encodeNonce(nonce), encodeInt(atNs, "atNs")];
    if (options?.unseen === true) {
      await this.tx.defer(this.sql.add, params, (r) =>
        r.rowCount === 1
          ? null
          : new SubstrateError("conflict", `nonce ${params[1]} is already recorded for session ${sessionId}`),
      );
      return true;
    }
    // A racing transaction holding the same key makes this wait for its outcome: it either
    // commits (we insert nothing and answer false) or rolls back (we insert and answer true).
    const { rowCount } = await this.tx.query(this.sql.add, params);
    return rowCount === 1;
  }

  async count(sessionId: string): Promise<number> {
    const { rows } = await this.tx.query<{ count: unknown }>(this.sql.count, [
      encodeText(sessionId, "session_id"),
    ]);
    return decodeInt(rows[0]?.count ?? 0, "count");
  }
}
