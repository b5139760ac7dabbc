// The nonce store on leash_nonces: one row per (session, nonce), the primary key doing the refusing.
// It keeps no copy of nonces in session state; `add` is the only place a nonce is accepted.
import type { Nonce, NonceStore } from "@leash/core";
import { SubstrateError } from "@leash/core";
import { decodeInt, encodeInt, encodeNonce, encodeText } from "./codec.js";
import type { Statements } from "./sql.js";
import type { BatchMemory, TxContext } from "./tx.js";

/** How a batch's memory keys a (session, nonce) pair; PostgreSQL text holds no U+0000, so it cannot be ambiguous. */
export function nonceKey(sessionId: string, nonceJson: string): string {
  return `${sessionId}\u0000${nonceJson}`;
}

export class PostgresNonceStore implements NonceStore {
  /** In a batch: nonces this transaction recorded, handed on by rememberIn. */
  private readonly added = new Set<string>();

  constructor(
    private readonly tx: TxContext,
    private readonly sql: Statements["nonces"],
    private readonly memory?: BatchMemory,
  ) {}

  async has(sessionId: string, nonce: Nonce): Promise<boolean> {
    const params = [encodeText(sessionId, "session_id"), encodeNonce(nonce)];
    if (this.memory !== undefined) {
      // What the batch read ahead under its lock, or recorded itself since: nobody else can add to it.
      const key = nonceKey(params[0]!, params[1]!);
      const known = this.added.has(key) || this.memory.nonces.get(key);
      if (known !== undefined) {
        await this.tx.usable(this.sql.has.op);
        return known;
      }
    }
    const { rowCount } = await this.tx.query(this.sql.has, params);
    return rowCount !== null && rowCount > 0;
  }

  /** Hands the nonces this transaction recorded to the batch's next transactions (once its savepoint is released). */
  rememberIn(memory: BatchMemory): void {
    for (const key of this.added) memory.nonces.set(key, true);
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
      this.added.add(nonceKey(params[0] as string, params[1] as string));
      return true;
    }
    // A racing transaction holding the same key makes this wait for its outcome: it either
    // commits (we insert nothing and answer false) or rolls back (we insert and answer true).
    const { rowCount } = await this.tx.query(this.sql.add, params);
    // Recorded either way now: by this call, or before it.
    this.added.add(nonceKey(params[0] as string, params[1] as string));
    return rowCount === 1;
  }

  async count(sessionId: string): Promise<number> {
    const { rows } = await this.tx.query<{ count: unknown }>(this.sql.count, [
      encodeText(sessionId, "session_id"),
    ]);
    return decodeInt(rows[0]?.count ?? 0, "count");
  }
}
