// Chain verification for Node: the pure walk of ./verify with node:crypto (native code) underneath,
// optionally with signature checks run ahead on the libuv thread pool. Same answers, only faster.

import { createHash, createPublicKey, type KeyObject, verify } from "node:crypto";
import type { ChainEntryRecord } from "@leash/core";
import { ChainError } from "./errors.js";
import { base64UrlDecode } from "./verify/encoding.js";
import { protectedHeaderB64 } from "./verify/format.js";
import { publicKeyBytes } from "./verify/keys.js";
import { nobleBackend } from "./verify/noble.js";
import {
  type ChainEntries,
  type VerifyBackend,
  type VerifyChainOptions,
  type VerifyChainResult,
  verifyChainWith,
} from "./verify/verify-chain.js";

const sha256Hex = (text: string): string => createHash("sha256").update(text, "utf8").digest("hex");
const base64Url = (text: string): string => Buffer.from(text, "utf8").toString("base64url");
const keyObjectOf = (raw: Uint8Array): KeyObject =>
  createPublicKey({
    key: { kty: "OKP", crv: "Ed25519", x: Buffer.from(raw).toString("base64url") },
    format: "jwk",
  });

export const nodeBackend: VerifyBackend = {
  name: "node",
  sha256Hex,
  base64Url,
  prepareKey: keyObjectOf,
  verify: (signingInput, signature, key) => {
    try {
      return verify(null, Buffer.from(signingInput, "latin1"), key as KeyObject, signature);
    } catch {
      return false;
    }
  },
};

export interface NodeVerifyChainOptions extends VerifyChainOptions {
  /** "node" (default, node:crypto) or "noble" (the browser-safe code path, for cross-checking). */
  verifier?: "node" | "noble";
  /**
   * Signature checks kept in flight on the libuv thread pool ahead of the walk (node verifier
   * only). 1, the default, verifies synchronously on the calling thread; 32–64 uses every core
   * the pool has (UV_THREADPOOL_SIZE, 4 by default). Results and failure reporting are identical.
   */
  parallel?: number;
}

/**
 * Verifies a chain from its genesis, following key rotations; reports the first bad entry by stream
 * index and seq. See ChainFailureKind for what each failure kind means.
 * @throws ChainError "invalid_argument" / "key_invalid" for bad options, never for a bad chain.
 */
export function verifyChain(
  entries: ChainEntries,
  options: NodeVerifyChainOptions,
): Promise<VerifyChainResult> {
  const parallel = options.parallel ?? 1;
  if (!Number.isSafeInteger(parallel) || parallel < 1) {
    throw new ChainError("invalid_argument", "parallel must be a positive integer");
  }
  if (options.verifier === "noble") return verifyChainWith(nobleBackend, entries, options);
  if (parallel === 1) return verifyChainWith(nodeBackend, entries, options);
  return verifyAhead(entries, options, parallel);
}

interface Precomputed {
  key: KeyObject;
  signature: Uint8Array;
  ok: boolean;
}

/**
 * Runs crypto.verify asynchronously for up to `window` entries ahead of the walk, and lets the walk
 * use a result only when it asks about the very same signing input, signature bytes and key object.
 * Keys are guessed from the key_id column (trusted keys and keys named by key_rotation bodies seen
 * so far); a wrong guess costs only a synchronous check later, never a different answer: the walk
 * still decides which key is in force.
 */
async function verifyAhead(
  entries: ChainEntries,
  options: VerifyChainOptions,
  window: number,
): Promise<VerifyChainResult> {
  const ring = keyRing(options.publicKeys);
  const done = new Map<string, Precomputed>();
  // Once the walk only classifies a failure, later signatures are (almost) never needed.
  let classifying = false;
  const start = (record: ChainEntryRecord): Promise<void> =>
    classifying ? Promise.resolve() : checkAhead(record, ring, done);
  return verifyChainWith(usingPrecomputed(ring.keyFor, done), readAhead(entries, window, start), options, {
    onLookahead: () => {
      classifying = true;
    },
  });
}

/** The look-ahead's keys: one KeyObject per raw key, and the guess of which key each key id names. */
interface KeyRing {
  keyFor(raw: Uint8Array): KeyObject;
  learn(raw: Uint8Array, id: string): void;
  byKeyId: Map<string, KeyObject>;
}

function keyRing(publicKeys: VerifyChainOptions["publicKeys"]): KeyRing {
  const keyObjects = new Map<string, KeyObject>();
  const keyFor = (raw: Uint8Array): KeyObject => {
    const hex = Buffer.from(raw).toString("hex");
    let key = keyObjects.get(hex);
    if (key === undefined) {
      key = keyObjectOf(raw);
      keyObjects.set(hex, key);
    }
    return key;
  };
  const byKeyId = new Map<string, KeyObject>();
  const learn = (raw: Uint8Array, id: string): void => {
    byKeyId.set(id, keyFor(raw));
  };
  for (const key of publicKeys) {
    const raw = publicKeyBytes(key);
    learn(raw, createHash("sha256").update(raw).digest("hex").slice(0, 16));
  }
  return { keyFor, learn, byKeyId };
}

/** The node backend, answering from a result computed ahead when it is for the very same input, signature and key. */
function usingPrecomputed(
  keyFor: (raw: Uint8Array) => KeyObject,
  done: Map<string, Precomputed>,
): VerifyBackend {
  return {
    name: "node",
    sha256Hex,
    base64Url,
    prepareKey: keyFor,
    verify: (signingInput, signature, key) => {
      const hit = done.get(signingInput);
      if (hit !== undefined) {
        done.delete(signingInput);
        if (hit.key === key && Buffer.from(hit.signature).equals(signature)) return hit.ok;
      }
      return nodeBackend.verify(signingInput, signature, key);
    },
  };
}

/** Starts an asynchronous check of the entry's signature under the key its key_id is guessed to name. */
function checkAhead(record: ChainEntryRecord, ring: KeyRing, done: Map<string, Precomputed>): Promise<void> {
  if (typeof record !== "object" || record === null || typeof record.body !== "string")
    return Promise.resolve();
  if (record.kind === "key_rotation") {
    try {
      const data = JSON.parse(record.body).data;
      const next = publicKeyBytes(data.next_public_key);
      if (typeof data.next_key_id === "string") ring.learn(next, data.next_key_id);
    } catch {
      // A malformed rotation is the walk's to report.
    }
  }
  const key = ring.byKeyId.get(record.key_id);
  const signature = typeof record.signature === "string" ? base64UrlDecode(record.signature) : null;
  if (key === undefined || signature === null || signature.length !== 64) return Promise.resolve();
  const signingInput = `${protectedHeaderB64(record.key_id)}.${base64Url(record.body)}`;
  return new Promise((resolve) => {
    verify(null, Buffer.from(signingInput, "latin1"), key, signature, (error, ok) => {
      if (error === null) done.set(signingInput, { key, signature, ok });
      resolve();
    });
  });
}

/** The entries, each yielded once the check started `window` entries earlier has finished. */
async function* readAhead(
  entries: ChainEntries,
  window: number,
  start: (record: ChainEntryRecord) => Promise<void>,
): AsyncGenerator<ChainEntryRecord> {
  const queue: { record: ChainEntryRecord; ready: Promise<void> }[] = [];
  for await (const record of entries) {
    queue.push({ record, ready: start(record) });
    if (queue.length >= window) {
      const head = queue.shift()!;
      await head.ready;
      yield head.record;
    }
  }
  for (const head of queue) {
    await head.ready;
    yield head.record;
  }
}
