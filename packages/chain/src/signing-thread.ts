// Ed25519 signatures made on worker threads, so an engine keeps deciding while its entries are signed.
// It holds no other key than the one it was given and never decides what to sign; Node only.

import { type KeyObject, sign } from "node:crypto";
import { Worker } from "node:worker_threads";
import { ChainError } from "./errors.js";
import { privateKeyOf, type Signer } from "./keys.js";

/** A signer with `signAsync` on worker threads; `close` stops them (it then signs on the caller's thread). */
export interface ThreadedSigner extends Signer {
  signAsync(message: Uint8Array): Promise<Uint8Array>;
  /** Stops the threads; signatures still owed are made first. Later calls sign synchronously. */
  close(): Promise<void>;
  /** How many threads sign (0 once closed, or after every thread has failed). */
  readonly threads: number;
}

export interface SigningThreadOptions {
  /** Worker threads to sign on. Default 1: one Ed25519 signature is ~40–60 µs, a thread keeps up with >15,000/s. */
  threads?: number;
}

// CommonJS, evaluated by the Worker itself: no file to locate next to dist/, whatever the bundler did.
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const { createPrivateKey, sign } = require("node:crypto");
const key = createPrivateKey({ key: Buffer.from(workerData.pkcs8), format: "der", type: "pkcs8" });
parentPort.on("message", (requests) => {
  const replies = [];
  for (const [id, data] of requests) {
    try {
      // A copy of exact size: a Buffer may be a view of a larger pooled ArrayBuffer, cloned whole.
      replies.push([id, new Uint8Array(sign(null, data, key)), null]);
    } catch (error) {
      replies.push([id, null, String((error && error.message) || error)]);
    }
  }
  parentPort.postMessage(replies);
});
`;

type Reply = [id: number, signature: Uint8Array | null, error: string | null];

interface Owed {
  readonly resolve: (signature: Uint8Array) => void;
  readonly reject: (error: unknown) => void;
}

/** One worker and the signatures it owes; unref'd while it owes none, so it never keeps a process alive. */
class SigningWorker {
  readonly #worker: Worker;
  readonly #owed = new Map<number, Owed>();
  #nextId = 0;
  #failure: ChainError | null = null;

  constructor(pkcs8: Uint8Array, onFailure: () => void) {
    this.#worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { pkcs8 } });
    this.#worker.unref();
    this.#worker.on("message", (replies: Reply[]) => {
      for (const [id, signature, error] of replies) {
        const owed = this.#owed.get(id);
        if (owed === undefined) continue;
        this.#owed.delete(id);
        if (signature !== null) owed.resolve(signature);
        else owed.reject(new ChainError("signer_failed", `the signing thread refused: ${error}`));
      }
      if (this.#owed.size === 0) this.#worker.unref();
    });
    const fail = (error: unknown) => {
      const detail = error instanceof Error ? error.message : String(error);
      this.#failure ??= new ChainError("signer_failed", `the signing thread stopped: ${detail}`, {
        cause: error,
      });
      for (const owed of this.#owed.values()) owed.reject(this.#failure);
      this.#owed.clear();
      onFailure();
    };
    this.#worker.on("error", fail);
    this.#worker.on("exit", (code) => fail(new Error(`exit code ${code}`)));
  }

  get failed(): boolean {
    return this.#failure !== null;
  }

  sign(data: Uint8Array): Promise<Uint8Array> {
    if (this.#failure !== null) return Promise.reject(this.#failure);
    const id = this.#nextId++;
    return new Promise<Uint8Array>((resolve, reject) => {
      if (this.#owed.size === 0) this.#worker.ref();
      this.#owed.set(id, { resolve, reject });
      // Copied to its own ArrayBuffer: posting a view (a Buffer from Node's 8 kB pool, say) would
      // clone the whole buffer behind it.
      // Posted at once, one per message: a request held back to share a message (measured with
      // four) leaves the last ones of a batch unsigned until the batch ends, and the caller idle.
      this.#worker.postMessage([[id, Uint8Array.prototype.slice.call(data)]]);
    });
  }

  async close(): Promise<void> {
    // Signatures already asked for are made; the thread then ends.
    while (this.#owed.size > 0 && this.#failure === null) {
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    this.#failure ??= new ChainError("signer_failed", "the signing thread was closed");
    await this.#worker.terminate();
  }
}

/**
 * `signer` with `signAsync` made on `threads` worker threads (the private key is copied to them).
 * A thread that fails rejects the signatures it owed (their transactions fail; nothing is stored
 * unsigned) and is not used again; with none left, signAsync signs on the caller's thread.
 * @throws ChainError "key_wrong_type" for a signer that createSigner/loadSigningKey did not make.
 */
export function withSigningThread(signer: Signer, options: SigningThreadOptions = {}): ThreadedSigner {
  const key: KeyObject | undefined = privateKeyOf(signer);
  if (key === undefined) {
    throw new ChainError(
      "key_wrong_type",
      "withSigningThread needs a signer made by createSigner, loadSigningKey or generateKeyPair",
    );
  }
  const count = options.threads ?? 1;
  if (!Number.isInteger(count) || count < 1 || count > 64) {
    throw new ChainError("invalid_input", `threads must be an integer from 1 to 64, got ${String(count)}`);
  }
  const pkcs8 = new Uint8Array(key.export({ format: "der", type: "pkcs8" }));
  let workers: SigningWorker[] = [];
  const prune = () => {
    workers = workers.filter((w) => !w.failed);
  };
  for (let i = 0; i < count; i++) workers.push(new SigningWorker(pkcs8, prune));
  pkcs8.fill(0);
  let next = 0;
  return {
    keyId: signer.keyId,
    publicKeyRaw: signer.publicKeyRaw,
    publicKeyHex: signer.publicKeyHex,
    sign: (message) => signer.sign(message),
    signAsync(message) {
      if (workers.length === 0) {
        try {
          return Promise.resolve(new Uint8Array(sign(null, message, key)));
        } catch (error) {
          return Promise.reject(error);
        }
      }
      next = (next + 1) % workers.length;
      return workers[next]!.sign(message);
    },
    get threads() {
      return workers.length;
    },
    async close() {
      const closing = workers;
      workers = [];
      await Promise.all(closing.map((w) => w.close()));
    },
  };
}
