// The engine's trust in its store's audit chain: verified when the engine opens the store (from the last
// trusted checkpoint), and checked again before every append. It signs nothing and repairs nothing.
import {
  type ChainFailure,
  type Checkpoint,
  keyId,
  nodeBackend,
  parseEntryBody,
  publicKeyBytes,
  signingInputOf,
  type VerifyBackend,
  type VerifyChainResult,
  verifyChain,
  verifyChainWith,
} from "@leash/chain";
import type { ChainEntryRecord, Substrate, SubstrateTx } from "@leash/core";
import { LeashError } from "./errors.js";
import { findRollback, rollbackMessage } from "./rollback.js";
import type { ChainOpenReport } from "./types.js";

type Head = { seq: number; entry_hash: string } | null;

/** The key that signs the entry after the tip: its id, and its public key when the engine knows it. */
interface KeyInForce {
  id: string;
  publicKeyHex: string | null;
}

/** How far the chain is trusted: `count` entries, the last of which hashes to `head_hash`. */
interface Tip {
  count: number;
  head_hash: string;
  key: KeyInForce | null;
}

const PAGE = 1000;

/** Thrown (and turned into DENY fail_closed:chain_unverified by evaluate) while the chain does not verify. */
export class ChainUnverifiedError extends LeashError {
  override name = "ChainUnverifiedError";
  constructor(
    readonly failure: ChainFailure,
    readonly when: "open" | "append",
  ) {
    super(
      "chain_unverified",
      `the audit chain fails verification at entry ${failure.index} (seq ${failure.seq ?? "unknown"}): ${failure.kind}: ${failure.message}; this engine refuses every call until the store is repaired (see \`leash verify\`)`,
    );
  }
}

function hexOf(key: string | Uint8Array): string {
  return Buffer.from(publicKeyBytes(key)).toString("hex");
}

/** The key an entry hands over to: a key_rotation's next key, else its own signer. */
function keyAfter(entry: ChainEntryRecord, known: ReadonlyMap<string, string>): KeyInForce {
  if (entry.kind === "key_rotation") {
    const body = parseEntryBody(entry.body);
    if (typeof body !== "string" && typeof body.data.next_public_key === "string") {
      return { id: String(body.data.next_key_id), publicKeyHex: body.data.next_public_key };
    }
  }
  return { id: entry.key_id, publicKeyHex: known.get(entry.key_id) ?? null };
}

export interface ChainTrustOptions {
  substrate: Substrate;
  /** Keys trusted from the genesis on, by key id → public key hex (the signer's among them). */
  trustedKeys: ReadonlyMap<string, string>;
  /** Where the last trusted checkpoint comes from, if anywhere. */
  readCheckpoint: () => Promise<Checkpoint | null>;
  /** Where that checkpoint lives, for the message that refuses a rolled-back store. */
  checkpointLocation?: string;
}

export class ChainTrust {
  #tip: Tip | null = null;
  #refused: ChainUnverifiedError | null = null;
  #opening: Promise<void> | null = null;
  /** Own entries committed while the tip was elsewhere, by the hash they link to (see ownCommitted). */
  readonly #waiting = new Map<string, ChainEntryRecord>();
  /** Public keys met so far (trusted, and named by verified rotations), by key id. */
  readonly #known: Map<string, string>;
  /** node:crypto with key objects kept: the append check verifies a few entries at a time, often. */
  readonly #backend: VerifyBackend;
  report: ChainOpenReport | null = null;

  constructor(private readonly options: ChainTrustOptions) {
    this.#known = new Map(options.trustedKeys);
    const prepared = new Map<string, unknown>();
    this.#backend = {
      ...nodeBackend,
      prepareKey: (raw) => {
        const hex = Buffer.from(raw).toString("hex");
        let key = prepared.get(hex);
        if (key === undefined) {
          key = nodeBackend.prepareKey(raw);
          prepared.set(hex, key);
        }
        return key;
      },
    };
  }

  /** The checkpoint of what this engine trusts now, or null (nothing yet, or refused). */
  get checkpoint(): Checkpoint | null {
    if (this.#refused !== null || this.#tip === null || this.#tip.count === 0) return null;
    return { count: this.#tip.count, head_hash: this.#tip.head_hash };
  }

  /**
   * Whether `entry` is as its signer wrote it: its body hashes to its entry_hash, names its seq and
   * key, and carries a valid signature by a key this engine knows (trusted, or named by a verified
   * rotation). For an entry read back on its own, without the chain around it (a recorded answer).
   */
  signedByKnownKey(entry: ChainEntryRecord): boolean {
    const hex = this.#known.get(entry.key_id);
    if (hex === undefined || this.#backend.sha256Hex(entry.body) !== entry.entry_hash) return false;
    let body: { seq?: unknown; key_id?: unknown };
    try {
      body = JSON.parse(entry.body) as typeof body;
    } catch {
      return false;
    }
    if (body.seq !== entry.seq || body.key_id !== entry.key_id) return false;
    const key = this.#backend.prepareKey(Buffer.from(hex, "hex"));
    return this.#backend.verify(signingInputOf(entry), Buffer.from(entry.signature, "base64url"), key);
  }

  /**
   * What a row's stamping entry must be for the row to be served (state-auth.ts): signed by a known key,
   * or, before the entry this engine's trust starts from (a checkpoint or a key rotation), well formed and
   * signed by a key the engine was not given. Such a prefix is vouched for only by the hash links ending
   * at that anchor, which this engine does not walk, as it does not walk the prefix itself: an engine
   * given the earlier public keys too checks those rows' entries as it checks every other.
   */
  vouchesForStamp(entry: ChainEntryRecord): boolean {
    if (this.signedByKnownKey(entry)) return true;
    const from = this.report?.from_seq ?? 0;
    if (entry.seq >= from || this.#known.has(entry.key_id)) return false;
    if (this.#backend.sha256Hex(entry.body) !== entry.entry_hash) return false;
    try {
      const body = JSON.parse(entry.body) as { seq?: unknown; key_id?: unknown };
      return body.seq === entry.seq && body.key_id === entry.key_id;
    } catch {
      return false;
    }
  }

  /** True once the chain verified (and was not refused since): calls may go straight to the store. */
  get trusted(): boolean {
    return this.#tip !== null && this.#refused === null;
  }

  /**
   * Resolves once the chain verified; rejects with ChainUnverifiedError (for good) when it did not,
   * or with the storage error that stopped the walk (the next call tries again).
   */
  ready(): Promise<void> {
    if (this.#refused !== null) return Promise.reject(this.#refused);
    if (this.#tip !== null) return Promise.resolve();
    this.#opening ??= this.#open().finally(() => {
      this.#opening = null;
    });
    return this.#opening;
  }

  /** Refused for good: every later call fails closed with the same error. */
  #refuse(failure: ChainFailure, when: "open" | "append"): ChainUnverifiedError {
    if (this.#refused === null && this.report !== null)
      this.report = { ...this.report, verified: false, failure };
    this.#refused ??= new ChainUnverifiedError(failure, when);
    return this.#refused;
  }

  async #open(): Promise<void> {
    const started = performance.now();
    const checkpoint = await this.options.readCheckpoint();
    let start: { checkpoint: Checkpoint; trustedFrom: "checkpoint" | "key_rotation" } | null =
      checkpoint !== null && checkpoint.count > 0 ? { checkpoint, trustedFrom: "checkpoint" } : null;
    start ??= await this.#rotationAnchor();
    if (start?.trustedFrom === "checkpoint") await this.#refuseRollback(start.checkpoint, started);
    const from = start === null ? 0 : start.checkpoint.count - 1;
    let read = 0;
    let last: ChainEntryRecord | null = null;
    const { substrate } = this.options;
    async function* entries(): AsyncGenerator<ChainEntryRecord> {
      let next = from;
      for (;;) {
        const page = await substrate.transaction((tx) => tx.chain.range(next, PAGE));
        for (const entry of page) {
          read++;
          last = entry;
          yield entry;
        }
        if (page.length < PAGE) return;
        const after = page[page.length - 1]!.seq + 1;
        if (!Number.isSafeInteger(after) || after <= next) return; // a seq edited downwards
        next = after;
      }
    }
    const result: VerifyChainResult = await verifyChain(entries(), {
      publicKeys: [...this.#known.values()],
      parallel: 8,
      ...(checkpoint === null ? {} : { checkpoint }),
      ...(start === null ? {} : { checkpoint: start.checkpoint, fromCheckpoint: true as const }),
    });
    this.report = {
      verified: result.ok,
      trusted_from: start === null ? "genesis" : start.trustedFrom,
      from_seq: from,
      entries_read: read,
      count: result.ok ? result.count : result.count_verified,
      failure: result.ok ? null : result.failure,
      duration_ms: performance.now() - started,
    };
    if (!result.ok) throw this.#refuse(result.failure, "open");
    const head = last as ChainEntryRecord | null;
    this.#tip = {
      count: result.count,
      head_hash: result.head_hash,
      key: head === null ? null : this.#learn(keyAfter(head, this.#known)),
    };
  }

  /** A store behind or forked from the checkpoint (a restored older copy) is refused naming both heads. */
  async #refuseRollback(checkpoint: Checkpoint, started: number): Promise<void> {
    const finding = await findRollback(this.options.substrate, checkpoint);
    if (finding === null) return;
    const failure: ChainFailure = {
      index: checkpoint.count - 1,
      seq: checkpoint.count - 1,
      kind: "truncated",
      message: rollbackMessage(finding, this.options.checkpointLocation),
    };
    this.report = {
      verified: false,
      trusted_from: "checkpoint",
      from_seq: checkpoint.count - 1,
      entries_read: 0,
      count: 0,
      failure,
      duration_ms: performance.now() - started,
    };
    throw this.#refuse(failure, "open");
  }

  /**
   * The head this engine trusts without reading it (its tip) is read back once per transaction and its
   * row checked against the hash it trusted: an entry edited under a running engine (body, hash or
   * columns) is refused at the next append, not extended until a restart verifies the chain.
   * Heads beyond the tip are verified by checkAppend, whose walk starts at this same row.
   */
  async checkHeadRow(tx: SubstrateTx, head: Head | undefined): Promise<void> {
    if (this.#refused !== null) throw this.#refused;
    const tip = this.#tip;
    if (head == null || tip === null || head.seq !== tip.count - 1 || head.entry_hash !== tip.head_hash)
      return;
    const rows = await tx.chain.range(head.seq, 1);
    const result = await verifyChainWith(this.#backend, rows, {
      publicKeys: [...this.options.trustedKeys.values()],
      checkpoint: { count: tip.count, head_hash: tip.head_hash },
      fromCheckpoint: true,
    });
    if (!result.ok) throw this.#refuse(result.failure, "append");
  }

  /**
   * Without a checkpoint, a chain whose genesis key the engine was not given (it was rotated away
   * since) is trusted from the last key_rotation that hands over to a trusted key: only that key
   * signs what follows. Null when the genesis key is trusted, or no rotation hands over to one.
   */
  async #rotationAnchor(): Promise<{ checkpoint: Checkpoint; trustedFrom: "key_rotation" } | null> {
    const { substrate } = this.options;
    const [genesis] = await substrate.transaction((tx) => tx.chain.range(0, 1));
    if (genesis === undefined || this.#known.has(genesis.key_id)) return null;
    let anchor: ChainEntryRecord | null = null;
    for (let next = 0; ; ) {
      const page = await substrate.transaction((tx) => tx.chain.range(next, PAGE));
      for (const entry of page) {
        if (entry.kind !== "key_rotation") continue;
        const body = parseEntryBody(entry.body);
        if (typeof body !== "string" && this.#known.has(String(body.data.next_key_id))) anchor = entry;
      }
      if (page.length < PAGE) break;
      const after = page[page.length - 1]!.seq + 1;
      if (!Number.isSafeInteger(after) || after <= next) break;
      next = after;
    }
    if (anchor === null) return null;
    return {
      checkpoint: { count: anchor.seq + 1, head_hash: anchor.entry_hash },
      trustedFrom: "key_rotation",
    };
  }

  #learn(key: KeyInForce): KeyInForce {
    if (key.publicKeyHex !== null) this.#known.set(key.id, key.publicKeyHex);
    return key;
  }

  /** Tips verified inside open transactions: trusted only once the transaction commits (see committed). */
  readonly #verifiedIn = new WeakMap<SubstrateTx, Tip>();

  /**
   * checkAppend's answer when it needs no read (the head is this engine's own last entry, the tip,
   * or already verified in `tx`), or its refusal; undefined when entries other writers appended
   * must be read and verified first (checkAppend does that).
   */
  checkAppendNow(tx: SubstrateTx, head: Head, ownLast: string | null): string | null | undefined {
    if (this.#refused !== null) throw this.#refused;
    const verified = this.#verifiedIn.get(tx);
    if (verified !== undefined && head?.entry_hash === verified.head_hash) return verified.key?.id ?? null;
    const tip = this.#tip;
    if (tip === null)
      throw new LeashError("chain_unverified", "the engine appended before opening its store");
    if (head === null) {
      if (tip.count === 0) return null;
      throw this.#refuse(
        {
          index: 0,
          seq: 0,
          kind: "truncated",
          message: `the chain is empty; this engine verified ${tip.count} entries`,
        },
        "append",
      );
    }
    // Own entries link onto heads checked before them, so a head that is one of them is trusted.
    if (head.entry_hash === ownLast) return null;
    if (head.seq === tip.count - 1 && head.entry_hash === tip.head_hash) return tip.key?.id ?? null;
    if (head.seq < tip.count) {
      throw this.#refuse(
        {
          index: head.seq,
          seq: head.seq,
          kind: "truncated",
          message: `the chain's head is entry ${head.seq} (${head.entry_hash}); this engine verified ${tip.count} entries, the last ${tip.head_hash}`,
        },
        "append",
      );
    }
    return undefined;
  }

  /**
   * Checks, inside the appending transaction, that the head it links onto is trusted: its own last
   * entry, the tip, or entries other writers appended after the tip, which it verifies first.
   * Returns the id of the key in force at the head (null for an empty chain, or its own entry).
   * @throws ChainUnverifiedError when the head does not verify (the transaction then rolls back).
   */
  async checkAppend(tx: SubstrateTx, linked: Head, ownLast: string | null): Promise<string | null> {
    const known = this.checkAppendNow(tx, linked, ownLast);
    if (known !== undefined) return known;
    // Neither null nor the tip (checkAppendNow answered those): a head beyond the tip.
    const tip = this.#tip!;
    const head = linked!;
    // Entries other writers appended since the tip: verified before anything links onto them. Only
    // the head's signature is checked: it covers, through hashes and links, every entry back to the
    // tip, each of which its writer checked before linking onto it (verifyChain signatures: "last").
    const from = Math.max(0, tip.count - 1);
    const rows = await tx.chain.range(from, head.seq - from + 1);
    const keys = tip.key?.publicKeyHex ?? null;
    const result = await verifyChainWith(
      this.#backend,
      rows,
      tip.count === 0
        ? { publicKeys: [...this.options.trustedKeys.values()], signatures: "last" }
        : {
            publicKeys: keys === null ? [...this.options.trustedKeys.values()] : [keys],
            checkpoint: { count: tip.count, head_hash: tip.head_hash },
            fromCheckpoint: true,
            signatures: "last",
          },
    );
    if (!result.ok) throw this.#refuse(result.failure, "append");
    if (result.count !== head.seq + 1 || result.head_hash !== head.entry_hash) {
      throw this.#refuse(
        {
          index: result.count,
          seq: head.seq,
          kind: "truncated",
          message: `the store names entry ${head.seq} (${head.entry_hash}) as its head, but its chain ends at entry ${result.count - 1} (${result.head_hash})`,
        },
        "append",
      );
    }
    // Verified, so every rotation among them is genuine, and the last row's signer is in force.
    for (const row of rows) if (row.kind === "key_rotation") this.#learn(keyAfter(row, this.#known));
    const key = this.#learn(keyAfter(rows[rows.length - 1]!, this.#known));
    // Not the tip yet: in a group commit the head may be another engine's entry of the same batch,
    // which a failed COMMIT takes away again.
    this.#verifiedIn.set(tx, { count: result.count, head_hash: result.head_hash, key });
    return key.id;
  }

  /**
   * `tx` committed: what it verified becomes the tip, and the tip moves over the entries it appended
   * (own entries are not verified again).
   */
  committed(tx: SubstrateTx, appended: readonly ChainEntryRecord[] | undefined): void {
    const verified = this.#verifiedIn.get(tx);
    if (verified !== undefined && this.#tip !== null && verified.count > this.#tip.count)
      this.#tip = verified;
    for (const entry of appended ?? []) this.#waiting.set(entry.prev_hash, entry);
    this.#advance();
  }

  #advance(): void {
    const tip = this.#tip;
    if (tip === null) return;
    let { count, head_hash, key } = tip;
    for (
      let entry = this.#waiting.get(head_hash);
      entry !== undefined;
      entry = this.#waiting.get(head_hash)
    ) {
      this.#waiting.delete(head_hash);
      if (entry.seq !== count) break;
      key = this.#learn(keyAfter(entry, this.#known));
      count++;
      head_hash = entry.entry_hash;
    }
    this.#tip = { count, head_hash, key };
    // What the tip has passed can never be linked onto again.
    for (const [prev, entry] of this.#waiting) if (entry.seq < count) this.#waiting.delete(prev);
  }
}

/** Key id → public key hex of the keys an engine trusts from the genesis on. */
export function trustedKeyMap(keys: readonly (string | Uint8Array)[]): Map<string, string> {
  const map = new Map<string, string>();
  for (const key of keys) map.set(keyId(publicKeyBytes(key)), hexOf(key));
  return map;
}
