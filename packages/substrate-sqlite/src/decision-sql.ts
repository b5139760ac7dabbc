// The SQL of the statements every engine decision runs on SQLite (the hot path), named, in one place.
// Text only: stores.ts prepares and runs them; bench/statements.mjs runs the same text bare to time SQLite alone.

export const DECISION_SQL = {
  nonceHas: "SELECT 1 FROM leash_nonces WHERE session_id = ? AND nonce = ?",
  // DO NOTHING rather than a constraint error: a repeat is an answer (false), not a failure.
  nonceAdd:
    "INSERT INTO leash_nonces (session_id, nonce, recorded_ns) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
  accountUpdate: `UPDATE leash_budget_accounts SET scope = @scope, parent_id = @parent_id, limit_usd = @limit_usd,
           spent_usd = @spent_usd, reserved_usd = @reserved_usd, created_ns = @created_ns,
           updated_ns = @updated_ns, at_seq = @at_seq
         WHERE account_id = @account_id`,
  reservationInsert: `INSERT INTO leash_reservations (reservation_id, account_ids, session_id, call_number,
           amount_usd, actual_usd, status, idempotency_key, created_ns, expires_ns, resolved_ns)
         VALUES (@reservation_id, @account_ids, @session_id, @call_number, @amount_usd, @actual_usd,
           @status, @idempotency_key, @created_ns, @expires_ns, @resolved_ns)`,
  // Most updates keep status and created_ns. Leaving them out of SET spares the (status, created_ns)
  // index a delete and re-insert: SQLite maintains only the indexes whose columns an UPDATE sets.
  // last_heartbeat_ns is never set by an update (SessionStore.update): only touch writes it.
  sessionUpdateKeepingStatus: `UPDATE leash_sessions SET agent_id = @agent_id, organization_id = @organization_id,
           config = @config, state = @state, call_count = @call_count, updated_ns = @updated_ns,
           at_seq = @at_seq
         WHERE session_id = @session_id AND status = @status AND created_ns = @created_ns`,
  chainInsert: `INSERT INTO leash_chain (seq, entry_id, entry_hash, prev_hash, body, signature, key_id, kind,
           session_id, created_ns)
         VALUES (@seq, @entry_id, @entry_hash, @prev_hash, @body, @signature, @key_id, @kind,
           @session_id, @created_ns)
         ON CONFLICT DO NOTHING`,
  outboxInsert: `INSERT INTO leash_outbox (seq, entry_id, session_id, status, attempts, claimed_by, lease_until_ns,
           last_error, created_ns)
         VALUES (?, ?, ?, 'PENDING', 0, NULL, NULL, NULL, ?) ON CONFLICT DO NOTHING`,
} as const;
