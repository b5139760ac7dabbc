// Walks a chain from its genesis and reports the first entry that is not where, or what, it should be.
// Pure: hashing and signature checks come from a VerifyBackend (noble here, node:crypto in ../verify-node.ts).

import type { ChainEntryRecord } from "@leash/core";
import { ChainError } from "../errors.js";
import { base64UrlDecode } from "./encoding.js";
import { columnProblem, type EntryBody, parseEntryBody, protectedHeaderB64, ZERO_HASH } from "./format.js";
import { keyId, publicKeyBytes } from "./keys.js";
import type {
  ChainEntries,
  ChainFailure,
  ChainFailureKind,
  Checkpoint,
  VerifyBackend,
  VerifyChainOptions,
  VerifyChainResult,
} from "./verify-types.js";

export type {
  ChainEntries,
  ChainFailure,
  ChainFailureKind,
  Checkpoint,
  VerifyBackend,
  VerifyChainOptions,
  VerifyChainResult,
} from "./verify-types.js";

interface KnownKey {
  prepared: unknown;
  /** seq of the key_rotation entry that retired the key, once one has. */
  retiredBy: number | null;
}

/** Continues reading the stream after an anomaly, to decide what kind of failure it is. */
interface Lookahead {
  feed(record: ChainEntryRecord, index: number): ChainFailure | undefined;
  finish(): ChainFailure;
}

const PROGRESS_EVERY = 1024;

/** The mutable state of one walk: how far it got, the head, the chain id and the keys in force. */
class ChainWalk {
  /** Entries accepted so far, which is also the seq the next entry must have. */
  count = 0;
  head = ZERO_HASH;
  chainId: string | null = null;
  private readonly keys = new Map<string, KnownKey>();
  private readonly backend: VerifyBackend;
  private readonly checkpoint: Checkpoint | undefined;
  private readonly onProgress: ((verified: number) => void) | undefined;
  /** fromCheckpoint: the stream's first entry must be the checkpoint's head (see checkpointHead). */
  private awaitingHead: boolean;
  /** The stream index of the first entry: 0, or checkpoint.count − 1 when starting at a checkpoint. */
  readonly firstIndex: number;
  /** Signatures are checked from this stream index on (see VerifyChainOptions.signatures). */
  signaturesFrom = 0;
  private checkSignature = true;

  constructor(backend: VerifyBackend, options: VerifyChainOptions) {
    this.backend = backend;
    this.onProgress = options.onProgress;
    if (!Array.isArray(options.publicKeys) || options.publicKeys.length === 0) {
      throw new ChainError("invalid_argument", "verifyChain needs at least one trusted public key");
    }
    for (const key of options.publicKeys) {
      const raw = publicKeyBytes(key);
      this.keys.set(keyId(raw), { prepared: backend.prepareKey(raw), retiredBy: null });
    }
    const cp = options.checkpoint;
    if (cp !== undefined) {
      if (!Number.isSafeInteger(cp.count) || cp.count < 0 || !/^[0-9a-f]{64}$/.test(cp.head_hash)) {
        throw new ChainError(
          "invalid_argument",
          "a checkpoint is { count: natural number, head_hash: 64 hex }",
        );
      }
    }
    this.checkpoint = cp;
    this.awaitingHead = options.fromCheckpoint === true;
    if (this.awaitingHead && (cp === undefined || cp.count === 0)) {
      throw new ChainError("invalid_argument", "fromCheckpoint needs a checkpoint of at least one entry");
    }
    this.firstIndex = this.awaitingHead ? cp!.count - 1 : 0;
    if (options.chainId !== undefined) {
      if (typeof options.chainId !== "string" || options.chainId === "") {
        throw new ChainError("invalid_argument", "chainId must be a non-empty string");
      }
      this.chainId = options.chainId;
    }
  }

  /** Accepts the entry (undefined), fails outright, or asks to see what follows. */
  step(record: ChainEntryRecord, index: number): ChainFailure | Lookahead | undefined {
    this.checkSignature = index >= this.signaturesFrom;
    if (this.awaitingHead) return this.checkpointHead(record, index);
    const inspected = this.inspect(record);
    if (typeof inspected === "string") return failure(record, index, "edited", inspected);
    const body = inspected;

    const auth = this.authenticate(record, body);
    if (auth !== null) return this.afterUnauthentic(record, index, auth, body.seq);

    const n = this.count;
    if (this.chainId !== null && body.chain_id !== this.chainId) {
      return failure(
        record,
        index,
        "inserted",
        `entry belongs to chain ${body.chain_id}, not ${this.chainId}`,
        body.seq,
      );
    }
    // Position by the body's seq (signed): a renumbered seq column only says where rows were moved to.
    if (body.seq < n) {
      return failure(
        record,
        index,
        "inserted",
        `a second entry for seq ${body.seq} (already verified)`,
        body.seq,
      );
    }
    if (body.seq > n) return this.afterGap(record, index, body.seq);
    if (body.prev_hash !== this.head) {
      return failure(
        record,
        index,
        "inserted",
        `entry ${body.seq} links to ${body.prev_hash}, not to the entry before it (${this.head}): a fork or a foreign entry`,
        body.seq,
      );
    }
    // In its place by every signed field, yet its row is numbered otherwise: the column was edited.
    if (record.seq !== body.seq) return failure(record, index, "edited", "column seq differs from the body");
    return this.accept(record, index, body);
  }

  /**
   * The first entry of a walk that starts at the checkpoint: it must be the checkpoint's head, whole
   * (its hash pins everything before it). Only the key in force there signs what follows.
   */
  private checkpointHead(record: ChainEntryRecord, index: number): ChainFailure | undefined {
    const cp = this.checkpoint!;
    const at = cp.count - 1;
    const inspected = this.inspect(record);
    if (typeof inspected === "string") return failure(record, index, "edited", inspected);
    const body = inspected;
    if (body.seq !== at || record.entry_hash !== cp.head_hash) {
      // A signed-over edit of the head is still reported as what it is, when its key is known.
      const auth = body.seq === at ? this.authenticate(record, body) : null;
      if (auth !== null) return failure(record, index, auth.kind, auth.message, body.seq);
      return failure(
        record,
        index,
        "truncated",
        body.seq === at
          ? `entry ${at} is not the checkpoint's head ${cp.head_hash}: the chain was cut here and rewritten`
          : `the checkpoint's head, entry ${at}, is not where the checkpoint says (entry ${body.seq} is): the chain was cut or rewritten`,
        body.seq,
      );
    }
    if (record.seq !== body.seq) return failure(record, index, "edited", "column seq differs from the body");
    if (this.chainId !== null && body.chain_id !== this.chainId) {
      return failure(
        record,
        index,
        "inserted",
        `entry belongs to chain ${body.chain_id}, not ${this.chainId}`,
        body.seq,
      );
    }
    const inForce =
      body.kind === "key_rotation"
        ? {
            id: body.data.next_key_id as string,
            prepared: this.backend.prepareKey(publicKeyBytes(body.data.next_public_key as string)),
          }
        : { id: body.key_id, prepared: this.keys.get(body.key_id)?.prepared };
    // Keys retired before the checkpoint must not sign after it, so only the one in force stays.
    this.keys.clear();
    if (inForce.prepared !== undefined)
      this.keys.set(inForce.id, { prepared: inForce.prepared, retiredBy: null });
    this.chainId = body.chain_id;
    this.head = record.entry_hash;
    this.count = cp.count;
    this.awaitingHead = false;
    return undefined;
  }

  /** Runs after the stream ends without an entry-level failure. */
  end(streamLength: number): VerifyChainResult {
    const cp = this.checkpoint;
    if (this.awaitingHead) {
      return this.failed({
        index: streamLength,
        seq: cp!.count - 1,
        kind: "truncated",
        message: `the checkpoint counts ${cp!.count} entries; the chain has no entry ${cp!.count - 1}`,
      });
    }
    if (cp !== undefined && this.count < cp.count) {
      return this.failed({
        index: streamLength,
        seq: this.count,
        kind: "truncated",
        message: `the checkpoint counts ${cp.count} entries; the chain ends after ${this.count}`,
      });
    }
    this.onProgress?.(this.count);
    return { ok: true, count: this.count, head_hash: this.head, chain_id: this.chainId };
  }

  failed(f: ChainFailure): VerifyChainResult {
    this.onProgress?.(this.count);
    return { ok: false, count_verified: this.count, failure: f };
  }

  private accept(record: ChainEntryRecord, index: number, body: EntryBody): ChainFailure | undefined {
    const cp = this.checkpoint;
    if (cp !== undefined && body.seq === cp.count - 1 && record.entry_hash !== cp.head_hash) {
      return failure(
        record,
        index,
        "truncated",
        `entry ${body.seq} is not the checkpoint's head ${cp.head_hash}: the chain was cut here and rewritten`,
      );
    }
    if (body.seq === 0) this.chainId = body.chain_id;
    if (body.kind === "key_rotation") {
      // The rotating key stops signing here; only the key this entry introduces signs what follows.
      for (const key of this.keys.values()) if (key.retiredBy === null) key.retiredBy = body.seq;
      const next = body.data.next_public_key as string;
      this.keys.set(body.data.next_key_id as string, {
        prepared: this.backend.prepareKey(publicKeyBytes(next)),
        retiredBy: null,
      });
    }
    this.head = record.entry_hash;
    this.count++;
    if (this.count % PROGRESS_EVERY === 0) this.onProgress?.(this.count);
    return undefined;
  }

  /** The body if the entry is self-consistent, else why not. */
  private inspect(record: ChainEntryRecord): EntryBody | string {
    if (typeof record !== "object" || record === null) return "entry is not an object";
    if (typeof record.body !== "string") return "entry has no body";
    if (typeof record.entry_hash !== "string" || this.backend.sha256Hex(record.body) !== record.entry_hash) {
      return "SHA-256 of the body differs from entry_hash";
    }
    const body = parseEntryBody(record.body);
    if (typeof body === "string") return body;
    return columnProblem(record, body, { checkSeq: false }) ?? body;
  }

  private authenticate(
    record: ChainEntryRecord,
    body: EntryBody,
  ): { kind: "unknown_key" | "bad_signature"; message: string } | null {
    const key = this.keys.get(body.key_id);
    if (key === undefined) {
      return {
        kind: "unknown_key",
        message: `key ${body.key_id} is neither trusted nor introduced by a verified key_rotation`,
      };
    }
    if (key.retiredBy !== null) {
      return {
        kind: "unknown_key",
        message: `key ${body.key_id} was retired by the key_rotation at seq ${key.retiredBy}`,
      };
    }
    if (!this.checkSignature) return null;
    const signature = typeof record.signature === "string" ? base64UrlDecode(record.signature) : null;
    if (signature === null || signature.length !== 64) {
      return { kind: "bad_signature", message: "signature is not 64 bytes of canonical base64url" };
    }
    const input = `${protectedHeaderB64(body.key_id)}.${this.backend.base64Url(record.body)}`;
    if (!this.backend.verify(input, signature, key.prepared)) {
      return { kind: "bad_signature", message: `signature does not verify with key ${body.key_id}` };
    }
    return null;
  }

  /** Cheap test that a body may hold `"seq":count`, made once per count (a lookahead never moves it). */
  private seqProbe: { count: number; test: RegExp } | null = null;

  /**
   * True when `record` is exactly the entry that may come next: authentic, right seq, right link.
   * The seq is the body's: a renumbered row is still the entry its signed body says it is.
   */
  isNext(record: ChainEntryRecord): boolean {
    this.checkSignature = true; // classifying a failure: no shortcut
    if (typeof record !== "object" || record === null || typeof record.body !== "string") return false;
    if (this.seqProbe?.count !== this.count) {
      this.seqProbe = { count: this.count, test: new RegExp(`"seq"\\s*:\\s*${this.count}(?![0-9])`) };
    }
    if (!this.seqProbe.test.test(record.body)) return false;
    const body = this.inspect(record);
    if (typeof body === "string" || body.seq !== this.count) return false;
    if (this.authenticate(record, body) !== null) return false;
    if (this.chainId !== null && body.chain_id !== this.chainId) return false;
    return body.prev_hash === this.head;
  }

  /** An unauthentic entry is "inserted" if the genuine next entry follows it directly. */
  private afterUnauthentic(
    record: ChainEntryRecord,
    index: number,
    auth: { kind: "unknown_key" | "bad_signature"; message: string },
    seq: number,
  ): Lookahead {
    const own = failure(record, index, auth.kind, auth.message, seq);
    return {
      feed: (next) =>
        this.isNext(next)
          ? failure(
              record,
              index,
              "inserted",
              `${auth.message}, and the genuine next entry follows it: an extra entry`,
              seq,
            )
          : own,
      finish: () => own,
    };
  }

  /** A seq beyond the expected one: a deletion, unless the missing entry or a copy turns up later. */
  private afterGap(record: ChainEntryRecord, index: number, seq: number): Lookahead {
    const n = this.count;
    let successorAt = -1;
    let repeatedAt = -1;
    const inserted = (): ChainFailure =>
      failure(
        record,
        index,
        "inserted",
        `entry ${seq} appears early as a copy (again at index ${repeatedAt}); entry ${n} follows it`,
        seq,
      );
    return {
      feed: (next, i) => {
        if (successorAt < 0 && this.isNext(next)) successorAt = i;
        if (
          repeatedAt < 0 &&
          typeof next === "object" &&
          next !== null &&
          next.entry_hash === record.entry_hash &&
          this.backend.sha256Hex(next.body) === next.entry_hash
        ) {
          repeatedAt = i;
        }
        return successorAt >= 0 && repeatedAt >= 0 ? inserted() : undefined;
      },
      finish: () => {
        if (successorAt < 0) {
          const missing = seq - 1 === n ? `entry ${n} is` : `entries ${n}..${seq - 1} are`;
          return failure(record, index, "removed", `${missing} missing before entry ${seq}`, seq);
        }
        if (repeatedAt >= 0) return inserted();
        return failure(
          record,
          index,
          "reordered",
          `entry ${seq} comes before entry ${n}, which appears later at index ${successorAt}`,
          seq,
        );
      },
    };
  }
}

function failure(
  record: ChainEntryRecord,
  index: number,
  kind: ChainFailureKind,
  message: string,
  bodySeq?: number,
): ChainFailure {
  const seq =
    bodySeq ??
    (typeof record === "object" && record !== null && Number.isSafeInteger(record.seq) ? record.seq : null);
  return { index, seq, kind, message };
}

function isLookahead(value: ChainFailure | Lookahead): value is Lookahead {
  return "feed" in value;
}

/**
 * Verifies a whole chain from its genesis with the given backend. Entries must come in stream
 * order (usually ascending seq straight from ChainStore.range); the first bad one is reported.
 * `hooks.onLookahead` tells a backend that reads ahead that the walk has stopped accepting entries
 * and is only classifying a failure (so work done ahead for later entries is wasted).
 * @throws ChainError "invalid_argument" / "key_invalid" for bad options, never for a bad chain.
 */
export async function verifyChainWith(
  backend: VerifyBackend,
  entries: ChainEntries,
  options: VerifyChainOptions,
  hooks?: { onLookahead?: () => void },
): Promise<VerifyChainResult> {
  const walk = new ChainWalk(backend, options);
  if (options.signatures === "last") {
    if (!Array.isArray(entries))
      throw new ChainError("invalid_argument", 'signatures: "last" needs an array');
    walk.signaturesFrom = walk.firstIndex + entries.length - 1;
  } else if (options.signatures !== undefined && options.signatures !== "every") {
    throw new ChainError("invalid_argument", 'signatures is "every" or "last"');
  }
  let pending: Lookahead | undefined;
  let found: ChainFailure | undefined;
  let index = walk.firstIndex;
  // One step per entry; returns true to stop reading.
  const consume = (record: ChainEntryRecord): boolean => {
    if (pending !== undefined) {
      found = pending.feed(record, index);
    } else {
      const out = walk.step(record, index);
      if (out !== undefined) {
        if (isLookahead(out)) {
          pending = out;
          hooks?.onLookahead?.();
        } else {
          found = out;
        }
      }
    }
    index++;
    return found !== undefined;
  };
  if (Symbol.asyncIterator in entries) {
    for await (const record of entries) if (consume(record)) break;
  } else {
    for (const record of entries) if (consume(record)) break;
  }
  if (found === undefined && pending !== undefined) found = pending.finish();
  return found === undefined ? walk.end(index) : walk.failed(found);
}
