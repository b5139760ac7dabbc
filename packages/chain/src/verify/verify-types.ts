// What chain verification takes and reports: the backend's primitives, the options, the failure kinds
// (and the order in which an entry is judged) and the result. No behaviour: verify-chain.ts walks.
import type { ChainEntryRecord } from "@leash/core";

/** The primitives verification needs; a backend is chosen for speed, never for different results. */
export interface VerifyBackend {
  readonly name: string;
  /** Lowercase hex SHA-256 of the UTF-8 bytes of `text`. */
  sha256Hex(text: string): string;
  /** Unpadded base64url of the UTF-8 bytes of `text`. */
  base64Url(text: string): string;
  /** Turns a raw 32-byte public key into whatever `verify` wants; called once per key. */
  prepareKey(raw: Uint8Array): unknown;
  /** Ed25519 (RFC 8032, strict) over the ASCII signing input. */
  verify(signingInput: string, signature: Uint8Array, key: unknown): boolean;
}

/**
 * What went wrong at the first bad entry. `index` is its position in the stream given to
 * verifyChain (0-based), `seq` the seq it claims (the missing seq for "truncated"; null when
 * the seq column is not a number).
 *
 * - `edited`: the entry contradicts itself — SHA-256(body) ≠ entry_hash, the body is not a v1
 *   body, or a column (entry_id, prev_hash, key_id, kind, session_id, created_ns) differs from the
 *   body; or only its seq column differs while the entry sits where its body says it belongs.
 *   A seq column that differs is otherwise a matter of position: a store is read in column-seq
 *   order, so moving or inserting rows means renumbering them, and the body's seq (signed) says
 *   where the entry really belongs — such an entry is judged `reordered`, `inserted` or `removed`.
 * - `unknown_key`: signed by a key that is neither trusted nor introduced by a verified
 *   key_rotation, or by a key a rotation has since retired.
 * - `bad_signature`: the key is known but the signature does not verify.
 * - `inserted`: an entry that does not belong in this chain here — a second entry for a seq already
 *   seen (a replayed copy or a fork), an entry of another chain, a copy of a later entry, or an
 *   unauthentic entry (unknown key / bad signature) directly followed by the genuine next entry.
 * - `removed`: a gap — the entry claims a seq beyond the next expected one, and the entry that should
 *   come next (expected seq, linked to the last good entry) appears nowhere later in the stream.
 * - `reordered`: a gap whose missing entry does appear later in the stream (a swap or a move).
 * - `truncated`: the checkpoint says the chain had more entries, or that entry checkpoint.count − 1
 *   had another hash. Without a checkpoint a deleted tail cannot be told from a shorter chain.
 *
 * Order of judgement for one entry: edited, then authenticity, then position (by the body's seq):
 * an entry signed by a key a later rotation introduces, moved before that rotation, is `unknown_key`.
 * Reported `seq` is the body's when the body parses, else the column's. Classifying a gap
 * reads ahead to the end of the stream; that cost is paid only by a chain that already failed.
 */
export type ChainFailureKind =
  | "edited"
  | "removed"
  | "reordered"
  | "inserted"
  | "truncated"
  | "bad_signature"
  | "unknown_key";

export interface ChainFailure {
  index: number;
  seq: number | null;
  kind: ChainFailureKind;
  message: string;
}

export type VerifyChainResult =
  | { ok: true; count: number; head_hash: string; chain_id: string | null }
  | { ok: false; count_verified: number; failure: ChainFailure };

/** A (count, head hash) pair kept somewhere the chain's writer cannot rewrite. */
export interface Checkpoint {
  count: number;
  head_hash: string;
}

export interface VerifyChainOptions {
  /** Keys trusted to sign from the genesis on (hex or raw bytes); usually just the first key. */
  publicKeys: readonly (string | Uint8Array)[];
  /** Catches a deleted tail, and a rewritten chain from entry checkpoint.count − 1 back. */
  checkpoint?: Checkpoint;
  /** Pins the chain: entries of any other chain (genesis included) are "inserted". */
  chainId?: string;
  /** Called with the number of verified entries every 1,024 entries and once at the end. */
  onProgress?: (verified: number) => void;
  /**
   * Start at the checkpoint instead of the genesis: the stream begins with the checkpoint's head
   * (seq checkpoint.count − 1), which is trusted because its entry_hash is the checkpoint's, and the
   * entries before it are trusted history, not read. Stream indexes then count from checkpoint.count
   * − 1, so a failure still names the chain position. The key in force at the head is the one its
   * key_rotation names, else its key_id, which `publicKeys` must hold; no other key signs after it.
   * Needs a checkpoint with count > 0.
   */
  fromCheckpoint?: boolean;
  /**
   * "last": check the Ed25519 signature of the stream's last entry only (the stream must be an
   * array). Every other check still runs on every entry, so each earlier entry is pinned, through
   * the hashes and links the last signature covers, to an entry signed by the key in force: for a
   * writer about to link onto entries other writers (each of whom checked its own predecessor)
   * appended since its last verified head. Never for auditing a chain: a signature edited in the
   * middle goes unseen. Default "every".
   */
  signatures?: "every" | "last";
}

export type ChainEntries = Iterable<ChainEntryRecord> | AsyncIterable<ChainEntryRecord>;
