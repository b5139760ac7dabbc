// The SQL of the statements every engine decision runs on SQLite (the hot path), named, in one place.
// Text only: stores.ts prepares and runs them; bench/statements.mjs runs the same text bare to time SQLite alone.

export const DECISION_SQL = {
  // A nonce is spent when an entry of the session carries it, or (stores from before schema version 7)
  // a leash_nonces row holds it; both are primary-key-like probes.
  nonceHas: `SELECT 1 FROM leash_chain WHERE session_id = @session_id AND nonce = @nonce
         UNION ALL SELECT 1 FROM leash_nonces WHERE session_id = @session_id AND nonce = @nonce`,
  accountUpdate: `UPDATE leash_budget_accounts SET scope = @scope, parent_id = @parent_id, limit_usd = @limit_usd,
           spent_usd = @spent_usd, reserved_usd = @reserved_usd, created_ns = @created_ns,
           updated_ns = @updated_ns, at_seq = @at_seq
         WHERE account_id = @account_id`,
  reservationInsert: `INSERT INTO leash_reservations (reservation_id, account_ids, session_id, call_number,
           amount_usd, actual_usd, status, idempotency_key, created_ns, expires_ns, resolved_ns, at_seq)
         VALUES (@reservation_id, @account_ids, @session_id, @call_number, @amount_usd, @actual_usd,
           @status, @idempotency_key, @created_ns, @expires_ns, @resolved_ns, @at_seq)`,
  // Most updates keep status and created_ns. Leaving them out of SET spares the (status, created_ns)
  // index a delete and re-insert: SQLite maintains only the indexes whose columns an UPDATE sets.
  // last_heartbeat_ns is never set by an update (SessionStore.update): only touch writes it.
  sessionUpdateKeepingStatus: `UPDATE leash_sessions SET agent_id = @agent_id, organization_id = @organization_id,
           config = @config, state = @state, call_count = @call_count, updated_ns = @updated_ns,
           at_seq = @at_seq
         WHERE session_id = @session_id AND status = @status AND created_ns = @created_ns`,
  // A nonce already spent (the unique index on session_id, nonce) or recorded in the read-only
  // leash_nonces inserts nothing, as a taken entry_id does: stores.ts then says which.
  chainInsert: `INSERT INTO leash_chain (seq, entry_id, entry_hash, prev_hash, body, signature, key_id, kind,
           session_id, created_ns, nonce)
         SELECT @seq, @entry_id, @entry_hash, @prev_hash, @body, @signature, @key_id, @kind,
           @session_id, @created_ns, @nonce
         WHERE @nonce IS NULL
           OR NOT EXISTS (SELECT 1 FROM leash_nonces WHERE session_id = @session_id AND nonce = @nonce)
         ON CONFLICT DO NOTHING`,
  outboxInsert: `INSERT INTO leash_outbox (seq, entry_id, session_id, status, attempts, claimed_by, lease_until_ns,
           last_error, created_ns)
         VALUES (?, ?, ?, 'PENDING', 0, NULL, NULL, NULL, ?) ON CONFLICT DO NOTHING`,
} as const;
