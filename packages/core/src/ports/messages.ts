// The message-id port: which signed requests a cluster has already decided, so one request is one decision.
// Types and guarantees only; the daemon fills the id from its envelope, the engine reads and writes it.

/**
 * One request message that was decided: the envelope's id (scoped to the session it named) and the
 * decision entry that answered it. Written in the transaction that appends that entry, so neither
 * exists without the other; a re-delivered copy is answered from the entry, never decided again.
 */
export interface MessageRecord {
  session_id: string;
  /** The sender's message id (SP/1.0 envelope message_id); any non-empty text. */
  message_id: string;
  /** Seq of the decision entry that answered the message. */
  entry_seq: number;
  /**
   * The sender's timestamp (ns since the epoch, HMAC-covered). A copy older than the replay window is
   * refused by its timestamp alone, so a row may be pruned once its `sent_ns` is that far behind.
   */
  sent_ns: number;
}

export interface MessageStore {
  /**
   * The record of (sessionId, messageId): inserted in this transaction or committed; null when none.
   * Read without a lock of its own: the chain head's lock (taken first by every writer) orders it.
   */
  get(sessionId: string, messageId: string): Promise<MessageRecord | null>;
  /**
   * `get` for each pair, in order, in one call (one statement on PostgreSQL). An empty list gives an
   * empty list.
   */
  getEach(pairs: ReadonlyArray<{ sessionId: string; messageId: string }>): Promise<(MessageRecord | null)[]>;
  /**
   * MUST fail with SubstrateError "conflict" (writing nothing) when (session_id, message_id) is
   * recorded already, committed or in this transaction: the unique key is what decides between
   * two writers racing on one message.
   */
  insert(record: MessageRecord): Promise<void>;
  /**
   * Deletes up to `limit` records whose `sent_ns` < beforeNs (oldest first, where a store can order
   * them cheaply) and returns how many it deleted. Other records MUST stay.
   */
  prune(beforeNs: number, limit: number): Promise<number>;
  /** Number of stored records. */
  count(): Promise<number>;
}
