// The nonce store: spent nonces read from the chain's nonce column and the read-only leash_nonces.
// It writes nothing: an entry spends its nonce when chain.ts appends it, the unique index refusing a second.
import type { Nonce, NonceStore } from "@leash/core";
import type { BatchMemory } from "./batch-memory.js";
import { decodeInt, encodeNonce, encodeText } from "./codec.js";
import { nonceKey, type SpentNonces } from "./nonce-key.js";
import type { Statements } from "./sql.js";
import type { TxContext } from "./tx.js";

export class PostgresNonceStore implements NonceStore, SpentNonces {
  /** Nonces entries of this transaction spent (see chain.ts), handed on to the batch by rememberIn. */
  private readonly added = new Set<string>();
  /** Pairs `has` answered false for: an append spending one need not wait for its answer (chain.ts). */
  private readonly unspent = new Set<string>();
  /** In a batch: what `has` found on the server (key: nonceKey), handed on by rememberIn. */
  private readonly found = new Map<string, boolean>();

  constructor(
    private readonly tx: TxContext,
    private readonly sql: Statements["nonces"],
    private readonly memory?: BatchMemory,
  ) {}

  async has(sessionId: string, nonce: Nonce): Promise<boolean> {
    const params = [encodeText(sessionId, "session_id"), encodeNonce(nonce)];
    if (this.memory !== undefined) {
      // What the batch found or spent itself under its lock: nobody else can spend one meanwhile.
      const key = nonceKey(params[0]!, params[1]!);
      const known = this.added.has(key) || this.memory.nonces.get(key);
      if (known !== undefined) {
        await this.tx.usable(this.sql.has.op);
        if (!known) this.unspent.add(key);
        return known;
      }
    }
    const { rowCount } = await this.tx.query(this.sql.has, params);
    const key = nonceKey(params[0]!, params[1]!);
    const spent = (rowCount !== null && rowCount > 0) || this.added.has(key);
    if (!spent) this.unspent.add(key);
    if (this.memory !== undefined) this.found.set(key, spent);
    return spent;
  }

  /** Every pair the batch's memory does not answer, in one statement (sql.ts nonces.hasEach). */
  async hasEach(pairs: ReadonlyArray<{ sessionId: string; nonce: Nonce }>): Promise<boolean[]> {
    const params = pairs.map(({ sessionId, nonce }) => [
      encodeText(sessionId, "session_id"),
      encodeNonce(nonce),
    ]);
    const keys = params.map(([sessionId, nonceJson]) => nonceKey(sessionId!, nonceJson!));
    const answers: Array<boolean | undefined> = keys.map((key) =>
      this.added.has(key) ? true : this.memory?.nonces.get(key),
    );
    const asked = params.filter((_, i) => answers[i] === undefined);
    if (asked.length === 0) {
      await this.tx.usable(this.sql.hasEach.op);
    } else {
      const { rows } = await this.tx.query<{ i: unknown }>(this.sql.hasEach, [
        asked.map(([sessionId]) => sessionId),
        asked.map(([, nonceJson]) => nonceJson),
      ]);
      const spent = new Set(rows.map((row) => decodeInt(row.i, "i") - 1));
      let next = 0;
      for (let i = 0; i < answers.length; i++) {
        if (answers[i] !== undefined) continue;
        const key = keys[i]!;
        const found = spent.has(next++) || this.added.has(key);
        answers[i] = found;
        if (this.memory !== undefined) this.found.set(key, found);
      }
    }
    return answers.map((answer, i) => {
      if (!answer) this.unspent.add(keys[i]!);
      return answer === true;
    });
  }

  answeredUnspent(key: string): boolean {
    return this.unspent.has(key);
  }

  spend(key: string): void {
    this.added.add(key);
    this.unspent.delete(key);
  }

  /**
   * Hands what this transaction found and spent to the batch's next transactions (once its
   * savepoint is released), so they ask the server again about none of it.
   */
  rememberIn(memory: BatchMemory): void {
    for (const [key, spent] of this.found) memory.nonces.set(key, spent);
    for (const key of this.added) memory.nonces.set(key, true);
  }

  async count(sessionId: string): Promise<number> {
    const { rows } = await this.tx.query<{ count: unknown }>(this.sql.count, [
      encodeText(sessionId, "session_id"),
    ]);
    return decodeInt(rows[0]?.count ?? 0, "count");
  }
}
