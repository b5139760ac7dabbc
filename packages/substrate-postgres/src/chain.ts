// The chain store on leash_chain and its one-row head table leash_chain_head; bodies stay the exact text given.
// It never hashes, signs or verifies (that is @leash/chain): it keeps the chain gapless and appenders in line.
import type { ChainEntryRecord, ChainStore, ParamsBlob } from "@leash/core";
import { SubstrateError } from "@leash/core";
import type { BatchMemory } from "./batch-memory.js";
import {
  decodeInt,
  decodeNonce,
  decodeOptionalInt,
  encodeBody,
  encodeInt,
  encodeLimit,
  encodeOptionalNonce,
  encodeOptionalText,
  encodeText,
} from "./codec.js";
import { nonceKey, type SpentNonces } from "./nonce-key.js";
import type { Statements } from "./sql.js";
import type { TxContext } from "./tx.js";

export interface ChainRow {
  seq: unknown;
  entry_id: string;
  entry_hash: string;
  prev_hash: string;
  body: string;
  signature: string;
  key_id: string;
  kind: string;
  session_id: string | null;
  created_ns: unknown;
  /** The spent nonce's JSON text (codec.ts), or null. */
  nonce: string | null;
}

export function chainEntryFromRow(row: ChainRow): ChainEntryRecord {
  return {
    seq: decodeInt(row.seq, "seq"),
    entry_id: row.entry_id,
    entry_hash: row.entry_hash,
    prev_hash: row.prev_hash,
    body: row.body,
    signature: row.signature,
    key_id: row.key_id,
    kind: row.kind,
    session_id: row.session_id,
    created_ns: decodeInt(row.created_ns, "created_ns"),
    // Only an entry that spends one has the field, so an entry reads back as it was appended.
    ...(row.nonce === null || row.nonce === undefined ? {} : { nonce: decodeNonce(row.nonce) }),
  };
}

function toParams(entry: ChainEntryRecord): unknown[] {
  return [
    encodeInt(entry.seq, "seq"),
    encodeText(entry.entry_id, "entry_id"),
    encodeText(entry.entry_hash, "entry_hash"),
    encodeText(entry.prev_hash, "prev_hash"),
    encodeBody(entry.body, "body"),
    encodeText(entry.signature, "signature"),
    encodeText(entry.key_id, "key_id"),
    encodeText(entry.kind, "kind"),
    encodeOptionalText(entry.session_id, "session_id"),
    encodeInt(entry.created_ns, "created_ns"),
    encodeOptionalNonce(entry.nonce),
  ];
}

function missingHead(): SubstrateError {
  return new SubstrateError(
    "corrupt",
    "leash_chain_head has no row: the chain head was deleted (migrate() creates it; nothing else may remove it)",
  );
}

type Head = { seq: number; entry_hash: string } | null;

type AppendRow = { heads: unknown; head_seq: unknown; moved: unknown; spent?: boolean | null };

/** The spent-nonce key of an entry (TypeError for a nonce without a session), or null without a nonce. */
function nonceKeyOf(entry: ChainEntryRecord, params: readonly unknown[]): string | null {
  const nonceJson = params[10] as string | null;
  if (nonceJson === null) return null;
  if (entry.session_id === null) throw new TypeError("a chain entry with a nonce needs a session_id");
  return nonceKey(entry.session_id, nonceJson);
}

/** What the append statement's one answer row says went wrong, or null when the entry went in. */
function appendProblem(result: AppendRow | undefined, entry: ChainEntryRecord): SubstrateError | null {
  if (result === undefined || decodeInt(result.heads, "heads") === 0) return missingHead();
  if (decodeInt(result.moved, "moved") === 1) return null;
  const headSeq = decodeOptionalInt(result.head_seq, "leash_chain_head.seq") ?? -1;
  const head = headSeq < 0 ? "the chain is empty" : `the head is at ${headSeq}`;
  if (entry.seq <= headSeq) {
    return new SubstrateError("conflict", `chain seq ${entry.seq} is taken (${head})`);
  }
  if (entry.seq > headSeq + 1) {
    return new SubstrateError(
      "conflict",
      `chain seq ${entry.seq} is not the next one (${head}): appending it would leave a gap`,
    );
  }
  const nonce = entry.nonce ?? null;
  if (nonce === null || result.spent === false) {
    return new SubstrateError("conflict", `chain entry ${JSON.stringify(entry.entry_id)} already exists`);
  }
  const spent = `nonce ${JSON.stringify(nonce)} (${typeof nonce}) is already spent in session ${JSON.stringify(entry.session_id)}`;
  return new SubstrateError(
    "conflict",
    result.spent === true
      ? spent
      : `chain entry ${JSON.stringify(entry.entry_id)} already exists, or ${spent}`,
  );
}

export class PostgresChainStore implements ChainStore {
  /**
   * The head as this transaction last read it. head() locks the row until the transaction ends, so
   * only this transaction's own append can move it: a second head() (a caller that checks the head
   * and then appends after it reads it twice) is answered from here instead of another round trip.
   */
  private known: { head: Head } | null = null;
  /** Bumped by every append, so a head() answer that raced an append is not remembered. */
  private appends = 0;
  /** The entry at the known head, when known: `range(head.seq, n)` is then answered from it. */
  private headEntry: ChainEntryRecord | null = null;
  /**
   * Seqs this transaction appended right after the head it holds locked (sent without waiting): no
   * outbox item can hold one, since items are queued in the transaction that appends their entry.
   */
  readonly appendedSeqs = new Set<number>();

  constructor(
    private readonly tx: TxContext,
    private readonly sql: Statements["chain"],
    /** The transaction's nonce store, told of the nonces appended entries spend. */
    private readonly nonces: SpentNonces,
    /** What earlier transactions of the same batch left locked and known (see BatchMemory). */
    memory?: BatchMemory,
  ) {
    if (memory?.head !== undefined) {
      this.known = { head: memory.head === null ? null : { ...memory.head } };
      this.headEntry = memory.headEntry;
    }
  }

  /** Hands the head this transaction knows to the batch, once its savepoint has been released. */
  rememberIn(memory: BatchMemory): void {
    if (this.known !== null) memory.head = this.known.head === null ? null : { ...this.known.head };
    else memory.head = undefined;
    memory.headEntry = this.known === null ? null : this.headEntry;
  }

  async head(): Promise<Head> {
    if (this.known !== null) {
      const { head } = this.known;
      await this.tx.usable("chain.head");
      return head === null ? null : { ...head };
    }
    const appends = this.appends;
    const { rows } = await this.tx.query<{ seq: unknown; entry_hash: string | null }>(this.sql.head, []);
    const row = rows[0];
    if (row === undefined) throw missingHead();
    const seq = decodeOptionalInt(row.seq, "leash_chain_head.seq");
    const head = seq === null || row.entry_hash === null ? null : { seq, entry_hash: row.entry_hash };
    if (appends === this.appends) this.known = { head: head === null ? null : { ...head } };
    return head;
  }

  async append(entry: ChainEntryRecord): Promise<void> {
    const params = toParams(entry);
    const key = nonceKeyOf(entry, params);
    // With the head read (and locked) by this transaction and this entry right after it, only an
    // id clash could stop the append, or a nonce this transaction was told is unspent being spent
    // after all (the caller holds the session's lock: the engine's case): send it without waiting,
    // its answer checked before COMMIT, which the clash then fails with "conflict".
    const certain =
      this.known !== null &&
      (this.known.head?.seq ?? -1) === entry.seq - 1 &&
      (key === null || this.nonces.answeredUnspent(key));
    if (certain) return this.appendHeld(entry, params, key);
    if (entry.params !== undefined) await this.#putParams(entry.params);
    this.appends++;
    this.known = null;
    this.headEntry = null;
    const { rows } = await this.tx.query<AppendRow>(this.sql.append, params);
    const problem = appendProblem(rows[0], entry);
    if (problem !== null) throw problem;
    if (key !== null) this.nonces.spend(key);
  }

  /**
   * Appends without waiting for the answer (TxContext.defer): for an append whose outcome the
   * transaction's locks settle, or one of SubstrateTx.writeBatch, which waits for every answer
   * before it resolves. A failed check of the answer fails the transaction.
   */
  async appendHeld(
    entry: ChainEntryRecord,
    params: unknown[] = toParams(entry),
    key: string | null = nonceKeyOf(entry, params),
  ): Promise<void> {
    this.appends++;
    this.known = null;
    this.headEntry = null;
    // Before the first await: the outbox's enqueue, issued in the same turn, must see it.
    this.appendedSeqs.add(entry.seq);
    const blob = entry.params === undefined ? null : this.#putParams(entry.params);
    await this.tx.defer(this.sql.append, params, (result) => appendProblem(result.rows[0], entry));
    if (blob !== null) await blob;
    if (key !== null) this.nonces.spend(key);
    // The head row stays locked by this transaction, so the head is now this entry for it.
    this.known = { head: { seq: entry.seq, entry_hash: entry.entry_hash } };
    this.headEntry = { ...entry };
  }

  async range(fromSeq: number, limit: number): Promise<ChainEntryRecord[]> {
    // The head is locked and is the last entry, so from its seq on there is exactly that entry.
    const head = this.known?.head;
    if (head && this.headEntry?.seq === head.seq && fromSeq === head.seq && limit >= 1) {
      await this.tx.usable("chain.range");
      return [{ ...this.headEntry }];
    }
    const { rows } = await this.tx.query<ChainRow>(this.sql.range, [
      encodeInt(fromSeq, "fromSeq"),
      encodeLimit(Math.max(0, limit)),
    ]);
    return rows.map(chainEntryFromRow);
  }

  async count(): Promise<number> {
    const { rows } = await this.tx.query<{ count: unknown }>(this.sql.count, []);
    return decodeInt(rows[0]?.count ?? 0, "count");
  }

  async params(hashes: readonly string[]): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    if (hashes.length === 0) return found;
    const { rows } = await this.tx.query<{ hash: string; text: string }>(this.sql.params, [
      hashes.map((hash) => encodeText(hash, "hash")),
    ]);
    for (const row of rows) found.set(row.hash, row.text);
    return found;
  }

  /** Keeps an entry's params by digest, sent without waiting (its answer is checked before COMMIT). */
  #putParams(blob: ParamsBlob): Promise<void> {
    return this.tx.defer(
      this.sql.putParams,
      [encodeText(blob.hash, "params.hash"), encodeBody(blob.text, "params.text")],
      () => null,
    );
  }
}
