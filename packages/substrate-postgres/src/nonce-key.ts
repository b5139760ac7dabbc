// How the chain and nonce stores name a (session, nonce) pair, and what the chain store asks of
// the nonce store to spend one; no statements here, so neither store has to import the other.

/** How a batch's memory keys a (session, nonce) pair; PostgreSQL text holds no U+0000, so it cannot be ambiguous. */
export function nonceKey(sessionId: string, nonceJson: string): string {
  return `${sessionId}\u0000${nonceJson}`;
}

/** What the chain store asks of the transaction's nonce store, to append a spending entry without waiting. */
export interface SpentNonces {
  /** This transaction asked `has` about the pair and was told it is unspent. */
  answeredUnspent(key: string): boolean;
  /** This transaction appended an entry spending the pair. */
  spend(key: string): void;
}
