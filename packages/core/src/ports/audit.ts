// The audit ports: where the hash-chained log and its outbox live inside a substrate transaction.
// Storage only: hashing, signing and verifying belong to @leash/chain, delivery to @leash/relay.

import type { Nonce } from "../types.js";

/**
 * One stored chain entry. `body` is the exact canonical JSON that was hashed and signed; the other
 * fields are copies of what it says, kept as columns so stores can index and filter them.
 */
export interface ChainEntryRecord {
  /** 0-based position in the chain; gapless. */
  seq: number;
  /** UUIDv7 of the entry. */
  entry_id: string;
  /** Lowercase hex SHA-256 over `body`. */
  entry_hash: string;
  /** `entry_hash` of entry seq − 1, or 64 zeros for the first entry. */
  prev_hash: string;
  /** The signed canonical JSON, byte for byte as hashed. */
  body: string;
  /** Ed25519 signature (base64url) made with the key `key_id` names. */
  signature: string;
  key_id: string;
  /** What the entry records: "decision", "post_exec", "hitl_decision", "expiry", "reset", "key_rotation", … */
  kind: string;
  session_id: string | null;
  created_ns: number;
  /**
   * The nonce this entry spends for its session (an ALLOW decision's nonce), or null/absent. The
   * store keeps it as an indexed column: it is how `NonceStore.has` knows a nonce is used, so that
   * a session's used nonces are a projection of its entries, not a table of their own. An entry
   * with a nonce MUST have a `session_id`. The number 7 and the string "7" are different nonces.
   */
  nonce?: Nonce | null;
  /**
   * Write-only: params the entry commits to by digest alone (its data's `params_hash`, beside
   * `params_blob: true`), for the store to keep once per digest beside the chain (ChainStore.append).
   * `range` never returns it; readers fetch the text with ChainStore.params and check its digest.
   */
  params?: ParamsBlob;
}

/** A call's params as canonical JSON, and the lowercase hex SHA-256 of that text. */
export interface ParamsBlob {
  hash: string;
  text: string;
}

export interface ChainStore {
  /**
   * The newest entry's position and hash, or null for an empty chain. MUST lock the head for the
   * rest of the transaction (PostgreSQL: a head row FOR UPDATE), so two transactions can never
   * both append after the same entry.
   */
  head(): Promise<{ seq: number; entry_hash: string } | null>;
  /**
   * MUST fail with SubstrateError "conflict" when `seq` is taken; MUST move the head to this entry.
   * With a `nonce`, MUST fail with SubstrateError "conflict" (appending nothing) when the session
   * has spent that nonce already — an entry of the session carrying it, or a row of the nonce table
   * an older schema wrote (NonceStore) — so two transactions can never both spend one nonce; and
   * MUST reject an entry with a nonce but a null `session_id` (TypeError), appending nothing.
   * With `params`, MUST keep `params.text` under `params.hash` in the same transaction, once: a digest
   * already stored keeps its first text (content-addressed: a hundred entries of one call's params
   * store it once). The store need not check the digest; every reader does.
   */
  append(entry: ChainEntryRecord): Promise<void>;
  /**
   * The params texts stored under these digests (by append, this transaction's own included), keyed
   * by digest; a digest the store does not have is absent from the map.
   */
  params(hashes: readonly string[]): Promise<Map<string, string>>;
  /**
   * Entries with seq >= fromSeq in ascending order, at most `limit`. Each carries the `nonce` it was
   * appended with; an entry appended without one comes back without the field.
   */
  range(fromSeq: number, limit: number): Promise<ChainEntryRecord[]>;
  /** Number of stored entries. */
  count(): Promise<number>;
}

export type OutboxStatus = "PENDING" | "DELIVERED" | "DEAD";

/** One entry waiting to leave the machine (transactional outbox). */
export interface OutboxItem {
  seq: number;
  entry_id: string;
  session_id: string | null;
  status: OutboxStatus;
  attempts: number;
  /** Which relay holds the lease, until `lease_until_ns`. */
  claimed_by: string | null;
  lease_until_ns: number | null;
  last_error: string | null;
  created_ns: number;
}

/** What queuing an entry's outbox item takes (the rest of an OutboxItem starts as PENDING, unleased). */
export interface OutboxEnqueue {
  seq: number;
  entry_id: string;
  session_id: string | null;
  created_ns: number;
}

export interface OutboxStore {
  /** Called in the transaction that appends the entry. MUST fail "conflict" when seq is already queued. */
  enqueue(item: OutboxEnqueue): Promise<void>;
  /**
   * Leases up to `limit` PENDING items, lowest seq first, whose lease is free or expired, to `relayId`
   * until nowNs + leaseNs, and increments their attempts. Two relays MUST never hold the same item at
   * once (PostgreSQL: FOR UPDATE SKIP LOCKED).
   */
  claim(options: { relayId: string; limit: number; nowNs: number; leaseNs: number }): Promise<OutboxItem[]>;
  /** Marks items DELIVERED, only where `relayId` still holds the lease; returns how many. */
  ack(relayId: string, seqs: number[]): Promise<number>;
  /**
   * Returns a leased item to PENDING (or DEAD with the reason), only where `relayId` holds it.
   * With `unsent` (and `dead` false) the relay never tried the item under this lease (it waited
   * behind an older item of its session, or the sink stopped before it): the store MUST take back
   * the attempt the claim counted (attempts − 1, never below 0), so attempts count only deliveries
   * actually tried. `unsent` with `dead` true MUST be ignored.
   */
  fail(
    relayId: string,
    seq: number,
    error: string,
    dead: boolean,
    options?: { unsent?: boolean },
  ): Promise<void>;
  /**
   * Moves DEAD items back to PENDING, for an operator who fixed what made them fail (a sink's secret,
   * say): with `all: true` every DEAD item, with `seqs` those of the given seqs that are DEAD. It is
   * the dead letter's only way back, and an operator's call: no relay makes it on its own.
   * - MUST change DEAD items only: PENDING (leased or not) and DELIVERED items, and seqs that are not
   *   queued, stay exactly as they are.
   * - Each moved item MUST become PENDING with `attempts` 0 (a relay's give-up count starts afresh),
   *   `claimed_by` and `lease_until_ns` null (free to claim at once), and `last_error` prefixed, not
   *   cleared: `requeued at <nowNs>: <last_error>`, nowNs as the exact integer it holds
   *   (`BigInt(nowNs).toString()`: what an integer column stores, never rounded digits or an
   *   exponent), `no error recorded` standing for a null reason. Why it died so stays visible
   *   while it waits, and after delivery (ack keeps last_error), until a newer failure replaces it.
   *   `seq`, `entry_id`, `session_id` and `created_ns` MUST NOT change.
   * - MUST reject with a TypeError, changing nothing, unless exactly one of `all: true` and `seqs` is
   *   given. An empty `seqs` moves nothing.
   * Returns how many items moved.
   */
  requeue(options: { seqs?: number[]; all?: boolean; nowNs: number }): Promise<number>;
  list(filter: { status?: OutboxStatus; limit?: number }): Promise<OutboxItem[]>;
  counts(): Promise<Record<OutboxStatus, number>>;
}
