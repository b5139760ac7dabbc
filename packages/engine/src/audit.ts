// Writes the engine's audit records: one signed chain entry per state change, queued in the outbox,
// inside the caller's transaction. It decides nothing; hashing and signing live in @leash/chain.
import { buildEntry, chainIdOf, type Json, ROW_DIGESTS_FIELD, type Signer } from "@leash/chain";
import type { ChainEntryRecord, Nonce, OutboxEnqueue, ParamsBlob, SubstrateTx } from "@leash/core";
import { enqueueEntry, outboxItemOf } from "@leash/outbox";
import type { ChainTrust } from "./chain-trust.js";
import { LeashError } from "./errors.js";

/**
 * JSON that canonical JSON accepts: integers beyond 2^53 (epoch nanoseconds) become exact decimal
 * strings, non-finite numbers and undefined become null. Audit data must never fail to serialize.
 */
export function auditJson(value: unknown): Json {
  if (value === null || value === undefined) return null;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) return null;
    return Number.isInteger(value) && !Number.isSafeInteger(value) ? BigInt(value).toString() : value;
  }
  if (typeof value === "string" || typeof value === "boolean") return value;
  if (Array.isArray(value)) return value.map(auditJson);
  if (typeof value === "object") {
    const out: Record<string, Json> = {};
    // Object.keys, not Object.entries: no [key, value] pair allocated per field of every entry.
    for (const k of Object.keys(value)) {
      const v = (value as Record<string, unknown>)[k];
      if (v !== undefined) out[k] = auditJson(v);
    }
    return out;
  }
  return String(value);
}

/** A transaction that holds its appends in memory until it writes them (the engine's ProjectionTx). */
export interface HeldAppends extends SubstrateTx {
  appendNow(entry: ChainEntryRecord): void;
  enqueueNow(item: OutboxEnqueue): void;
}

/** A transaction that stamps the rows it changes (the engine's ProjectionTx: state-auth.ts). */
interface StampingTx {
  rowDigestsFor(seq: number): Record<string, string> | undefined;
}

export class Auditor {
  /** The chain's id, cached once a transaction that read it has committed (see `committed`). */
  #chainId: string | null = null;
  /**
   * The id each open transaction read from entry 0. Not cached before that transaction commits: in
   * a group commit the genesis it read may be another transaction's of the same batch, which a
   * failed COMMIT takes away, and every later entry would then name a chain that never existed.
   */
  readonly #readIn = new WeakMap<SubstrateTx, string>();
  /** The head this engine last appended: while it is still the head, it is trusted and its key known. */
  #lastAppended: string | null = null;
  /** The entries each open transaction appended, handed to the trust once it commits. */
  readonly #appendedIn = new WeakMap<SubstrateTx, ChainEntryRecord[]>();

  constructor(
    public signer: Signer,
    private readonly trust: ChainTrust,
  ) {}

  /**
   * Refuses to link onto a head that does not verify (ChainTrust.checkAppend: entries other writers
   * appended are verified first), and to sign when another writer has moved the chain to a
   * different key (a rotation by another process): such entries would only ever verify as
   * `unknown_key`. A lone writer whose own entry is the head pays nothing beyond the head read.
   */
  async #assertKeyInForce(tx: SubstrateTx, head: ChainHead | null): Promise<void> {
    this.#assertSigner(await this.trust.checkAppend(tx, head, this.#lastAppended));
  }

  /**
   * Throws ChainUnverifiedError when the chain in `tx` no longer continues what this engine trusts
   * (its own last entry deleted, say): a row stamped with a lost entry is the chain's failure first.
   */
  async checkChain(tx: SubstrateTx): Promise<void> {
    await this.trust.checkAppend(tx, await tx.chain.head(), this.#lastAppended);
  }

  #assertSigner(inForce: string | null): void {
    if (inForce !== null && inForce !== this.signer.keyId) {
      throw new LeashError(
        "key_not_in_force",
        `the audit chain is signed with key ${inForce} now, not this engine's key ${this.signer.keyId}: load the current key`,
      );
    }
  }

  /**
   * `record` without a promise when nothing needs the store: the head is trusted without a read
   * (ChainTrust.checkAppendNow) and the chain's id is known. The entry and its outbox item are then
   * held in `tx` and the entry returned; otherwise this is `record` (a promise). Evaluate's
   * synchronous step (flow/run.ts) records through it.
   */
  recordNow(
    tx: HeldAppends,
    kind: string,
    data: Record<string, unknown>,
    nowNs: number,
    head: ChainHead | null,
    options?: EntryOptions,
  ): ChainEntryRecord | Promise<ChainEntryRecord> {
    const inForce = this.trust.checkAppendNow(tx, head, this.#lastAppended);
    const chainId = head === null ? null : (this.#chainId ?? this.#readIn.get(tx));
    if (inForce === undefined || chainId === undefined)
      return this.record(tx, kind, data, nowNs, head, options);
    this.#assertSigner(inForce);
    const entry = this.#entry(tx, head, chainId, kind, data, nowNs, options);
    tx.appendNow(entry);
    tx.enqueueNow(outboxItemOf(entry));
    this.#appended(tx, entry);
    return entry;
  }

  /**
   * Appends one entry after the current head and enqueues it for relay, in `tx`. `head` is the head
   * as the caller already read it in this transaction (read here when omitted). The append and the
   * enqueue are issued together: a substrate that pipelines statements sends them in one round trip.
   * `options.nonce` is the nonce the entry spends for its session (ChainEntryRecord.nonce): the
   * append, and with it the transaction, fails with SubstrateError "conflict" if it is spent already.
   */
  async record(
    tx: SubstrateTx,
    kind: string,
    data: Record<string, unknown>,
    nowNs: number,
    head?: ChainHead | null,
    options?: EntryOptions,
  ): Promise<ChainEntryRecord> {
    const current = head === undefined ? await tx.chain.head() : head;
    await this.#assertKeyInForce(tx, current);
    let chainId = this.#chainId;
    if (chainId === null && current !== null) {
      chainId = this.#readIn.get(tx) ?? null;
      if (chainId === null) {
        const [genesis] = await tx.chain.range(0, 1);
        if (genesis !== undefined) {
          chainId = chainIdOf(genesis);
          this.#readIn.set(tx, chainId);
        }
      }
    }
    const entry = this.#entry(tx, current, current === null ? null : chainId, kind, data, nowNs, options);
    // The transactional outbox: queued with the entry or not at all.
    await Promise.all([tx.chain.append(entry), enqueueEntry(tx, entry)]);
    this.#appended(tx, entry);
    return entry;
  }

  /**
   * The signed entry after `head`, spending `options.nonce` when given. Its data names the digests
   * of the rows `tx` changed since its last entry (`row_digests`, state-auth.ts), which it stamps.
   */
  #entry(
    tx: SubstrateTx,
    head: ChainHead | null,
    chainId: string | null,
    kind: string,
    data: Record<string, unknown>,
    nowNs: number,
    options: EntryOptions | undefined,
  ): ChainEntryRecord {
    const digests = (tx as Partial<StampingTx>).rowDigestsFor?.(head === null ? 0 : head.seq + 1);
    const json = auditJson(data) as Record<string, Json>;
    if (digests !== undefined) json[ROW_DIGESTS_FIELD] = digests;
    const entry = buildEntry({
      head,
      chainId,
      kind,
      data: json,
      signer: this.signer,
      nowNs,
    });
    if (options?.nonce !== undefined) entry.nonce = options.nonce;
    if (options?.params !== undefined) entry.params = options.params;
    return entry;
  }

  #appended(tx: SubstrateTx, entry: ChainEntryRecord): void {
    this.#lastAppended = entry.entry_hash;
    const appended = this.#appendedIn.get(tx);
    if (appended === undefined) this.#appendedIn.set(tx, [entry]);
    else appended.push(entry);
  }

  /**
   * Call once `tx` has committed: the chain id it read is then known to be the chain's for good,
   * and the trusted tip moves over the entries it appended.
   */
  committed(tx: SubstrateTx): void {
    const chainId = this.#readIn.get(tx);
    if (chainId !== undefined) this.#chainId ??= chainId;
    this.trust.committed(tx, this.#appendedIn.get(tx));
  }
}

export type ChainHead = { seq: number; entry_hash: string };

/** What an entry spends (its session's nonce) and stores beside it (params by digest). */
export interface EntryOptions {
  nonce?: Nonce;
  params?: ParamsBlob;
}
