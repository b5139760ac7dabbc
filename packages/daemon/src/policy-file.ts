// The daemon's policy file: loaded and validated before it is used, swapped atomically on a reload
// (SIGHUP or a change on disk); a file that does not load keeps the version in force and says why.
// It judges no call (the engine's policy layer does) and keeps no counter.
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

/** Reads and compiles `path`; throws an Error whose message names the file and the field. */
export function readPolicyFile(path: string): CompiledPolicy {
  const info = statSync(path);
  if (!info.isFile()) throw new Error(`${path}: not a regular file`);
  if (info.size > limits.MAX_POLICY_BYTES)
    throw new Error(`${path}: larger than ${limits.MAX_POLICY_BYTES} bytes`);
  return loadPolicy(readFileSync(path, "utf8"), { source: path });
}

export class PolicyFile implements PolicySource {
  readonly path: string;
  #current: CompiledPolicy;
  readonly #logger: PolicyLogger | undefined;
  #watching = false;

  /** Loads the file once; a file that does not load is an error here (the daemon does not start). */
  constructor(path: string, logger?: PolicyLogger) {
    this.path = path;
    this.#logger = logger;
    this.#current = readPolicyFile(path);
  }

  current(): CompiledPolicy {
    return this.#current;
  }

  /** Reads the file again: the new version replaces the old one whole, or not at all. */
  reload(): ReloadResult {
    let next: CompiledPolicy;
    try {
      next = readPolicyFile(this.path);
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
