// The daemon's policy file: loaded and validated before it is used, swapped atomically on a reload
// (SIGHUP or a change on disk); a file that does not load keeps the version in force and says why.
// It judges no call (the engine's policy layer does) and keeps no counter.
import { verify } from "node:crypto";
import { readFileSync, statSync, unwatchFile, watchFile } from "node:fs";
import type { PolicySource } from "@leash/engine";
import { type CompiledPolicy, limits, loadPolicy } from "@leash/policy";

export type ReloadResult =
  | { readonly ok: true; readonly hash: string; readonly changed: boolean }
  | { readonly ok: false; readonly error: string };

export interface PolicyLogger {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
}

/** A policy file that cannot be read, is too large, or whose signature does not verify. */
export class PolicyFileError extends Error {
  override name = "PolicyFileError";
}

/** The DER prefix of an Ed25519 SubjectPublicKeyInfo; the 32 raw key bytes follow it. */
const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/**
 * Checks `PATH.sig` (the hex Ed25519 signature of the file's exact bytes, `leash policy sign`) with the
 * operator's public key (64 hex characters); throws naming what is wrong.
 */
function checkSignature(path: string, bytes: Buffer, publicKeyHex: string): void {
  let sig: Buffer;
  try {
    sig = Buffer.from(readFileSync(`${path}.sig`, "utf8").trim(), "hex");
  } catch {
    throw new PolicyFileError(
      `${path}.sig: missing; a policy must be signed with the operator's key (leash policy sign)`,
    );
  }
  const der = Buffer.concat([ED25519_SPKI_PREFIX, Buffer.from(publicKeyHex, "hex")]);
  if (sig.length !== 64 || !verify(null, bytes, { key: der, format: "der", type: "spki" }, sig)) {
    throw new PolicyFileError(
      `${path}: its signature (${path}.sig) does not verify with the operator's policy key`,
    );
  }
}

/**
 * Reads and compiles `path` (after its signature, when `publicKeyHex` is given); throws an Error
 * whose message names the file and the field.
 */
export function readPolicyFile(path: string, publicKeyHex?: string): CompiledPolicy {
  let info: ReturnType<typeof statSync>;
  try {
    info = statSync(path);
  } catch (error) {
    throw new PolicyFileError(`${path}: cannot read it (${(error as NodeJS.ErrnoException).code ?? error})`);
  }
  if (!info.isFile()) throw new PolicyFileError(`${path}: not a regular file`);
  if (info.size > limits.MAX_POLICY_BYTES)
    throw new PolicyFileError(`${path}: larger than ${limits.MAX_POLICY_BYTES} bytes`);
  const bytes = readFileSync(path);
  if (publicKeyHex !== undefined) checkSignature(path, bytes, publicKeyHex);
  return loadPolicy(bytes.toString("utf8"), { source: path });
}

export class PolicyFile implements PolicySource {
  readonly path: string;
  #current: CompiledPolicy;
  readonly #logger: PolicyLogger | undefined;
  #watching = false;
  readonly #publicKeyHex: string | undefined;

  /**
   * Loads the file once; a file that does not load (or, with `publicKeyHex`, whose `.sig` does not
   * verify) is an error here (the daemon does not start).
   */
  constructor(path: string, logger?: PolicyLogger, publicKeyHex?: string) {
    this.path = path;
    this.#logger = logger;
    this.#publicKeyHex = publicKeyHex;
    this.#current = readPolicyFile(path, publicKeyHex);
  }

  current(): CompiledPolicy {
    return this.#current;
  }

  /** Reads the file again: the new version replaces the old one whole, or not at all. */
  reload(): ReloadResult {
    let next: CompiledPolicy;
    try {
      next = readPolicyFile(this.path, this.#publicKeyHex);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      this.#logger?.warn(
        { policy_file: this.path, policy_hash: this.#current.hash, error: message },
        "policy reload refused: the version in force stays",
      );
      return { ok: false, error: message };
    }
    const changed = next.hash !== this.#current.hash;
    this.#current = next;
    if (changed) {
      this.#logger?.info(
        { policy_file: this.path, policy_hash: next.hash, name: next.name },
        "policy reloaded",
      );
    }
    return { ok: true, hash: next.hash, changed };
  }

  /** Reloads when the file's size or time changes (polled every `intervalMs`, so an editor's rename is seen). */
  watch(intervalMs = 1000): void {
    if (this.#watching) return;
    this.#watching = true;
    watchFile(this.path, { interval: intervalMs, persistent: false }, (now, before) => {
      if (now.mtimeMs !== before.mtimeMs || now.size !== before.size) this.reload();
    });
  }

  close(): void {
    if (this.#watching) unwatchFile(this.path);
    this.#watching = false;
  }
}
