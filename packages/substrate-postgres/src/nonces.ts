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
  /** In a batch: what this transaction found or recorded (key: nonceKey), handed on by rememberIn. */
  private readonly known = new Map<string, boolean>();

  constructor(
    private readonly tx: TxContext,
    private readonly sql: Statements["nonces"],
    /** Set only in a group-commit batch, whose lock keeps every other Leash transaction out (see BatchMemory). */
    private readonly memory?: BatchMemory,
  ) {}

  async has(sessionId: string, nonce: Nonce): Promise<boolean> {
    const params = [encodeText(sessionId, "session_id"), encodeNonce(nonce)];
    const key = nonceKey(params[0]!, params[1]!);
    if (this.memory !== undefined) {
      // Found or recorded earlier in the batch, under its lock: nobody else can have added it since.
      const known = this.known.get(key) ?? this.memory.nonces.get(key);
      if (known !== undefined) {
        await this.tx.usable(this.sql.has.op);
        return known;
      }
    }
    const { rowCount } = await this.tx.query(this.sql.has, params);
    const recorded = rowCount !== null && rowCount > 0;
    if (this.memory !== undefined) this.known.set(key, recorded);
    return recorded;
  }

  /** Hands what this transaction found and recorded to the batch's next transactions (once its savepoint is released). */
  rememberIn(memory: BatchMemory): void {
    for (const [key, recorded] of this.known) memory.nonces.set(key, recorded);
  }

  /**
   * In a batch, a nonce the batch found absent (has() answered false) is inserted without waiting
   * for the answer (see TxContext.defer) and this resolves true: the batch lock keeps every other
   * Leash transaction from recording it meanwhile. Should it be recorded after all (a writer that
   * bypasses Leash), the transaction fails with "conflict" before it commits, instead of this call
   * answering false. Anywhere else the insert's answer is awaited.
   */
  async add(sessionId: string, nonce: Nonce, atNs: number): Promise<boolean> {
    const params = [encodeText(sessionId, "session_id"), encodeNonce(nonce), encodeInt(atNs, "atNs")];
    const key = nonceKey(params[0] as string, params[1] as string);
    if (this.memory !== undefined && (this.known.get(key) ?? this.memory.nonces.get(key)) === false) {
      await this.tx.defer(this.sql.add, params, (r) =>
        r.rowCount === 1
          ? null
          : new SubstrateError("conflict", `nonce ${params[1]} is already recorded for session ${sessionId}`),
      );
      this.known.set(key, true);
      return true;
    }
    // A racing transaction holding the same key makes this wait for its outcome: it either
    // commits (we insert nothing and answer false) or rolls back (we insert and answer true).
    const { rowCount } = await this.tx.query(this.sql.add, params);
    // Recorded either way now: by this call, or before it.
    if (this.memory !== undefined) this.known.set(key, true);
    return rowCount === 1;
  }

  async count(sessionId: string): Promise<number> {
    const { rows } = await this.tx.query<{ count: unknown }>(this.sql.count, [
      encodeText(sessionId, "session_id"),
    ]);
    return decodeInt(rows[0]?.count ?? 0, "count");
  }
}
