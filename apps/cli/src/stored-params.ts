// `leash verify`'s check of params stored by digest beside the chain: each one an entry names must be there and
// hash to the digest the entry signed. It notes the digests while the entries stream by; it judges nothing else.
import { createHash } from "node:crypto";
import type { ChainEntryRecord } from "@leash/core";

/** Digests looked up in one store read. */
const PAGE = 100;

export interface StoredParamsProblem {
  readonly index: number;
  readonly seq: number;
  readonly message: string;
}

/** Notes the params digests of `params_blob` entries passing through, and the params a file's lines carry. */
export class StoredParamsCheck {
  /** Digest → the first entry naming it (stream position and seq). */
  readonly #named = new Map<string, { index: number; seq: number }>();
  readonly #carried = new Map<string, string>();

  async *watch(entries: AsyncIterable<ChainEntryRecord>): AsyncGenerator<ChainEntryRecord> {
    let index = 0;
    for await (const entry of entries) {
      // Only entries that store params by digest are parsed again (an unreadable line is null here).
      const body = (entry as ChainEntryRecord | null)?.body;
      if (typeof body === "string" && body.includes('"params_blob":true')) {
        const hash = paramsHashOf(body);
        if (hash !== null && !this.#named.has(hash)) this.#named.set(hash, { index, seq: entry.seq });
        if (entry.params !== undefined) this.#carried.set(entry.params.hash, entry.params.text);
      }
      index++;
      yield entry;
    }
  }

  /** The first digest whose text is missing or altered (in the store, or in the file's lines), or null. */
  async problem(
    source: ((hashes: readonly string[]) => Promise<Map<string, string>>) | undefined,
  ): Promise<StoredParamsProblem | null> {
    const named = [...this.#named.entries()].sort((a, b) => a[1].index - b[1].index);
    for (let from = 0; from < named.length; from += PAGE) {
      const page = named.slice(from, from + PAGE);
      const missing = page.map(([hash]) => hash).filter((hash) => !this.#carried.has(hash));
      const fetched = missing.length === 0 || source === undefined ? new Map() : await source(missing);
      for (const [hash, at] of page) {
        const text = this.#carried.get(hash) ?? fetched.get(hash);
        const why =
          text === undefined
            ? "are not stored beside the chain"
            : createHash("sha256").update(text, "utf8").digest("hex") !== hash
              ? "do not hash to it (altered)"
              : null;
        if (why !== null) return { ...at, message: `the params of digest ${hash} ${why}` };
      }
    }
    return null;
  }
}

function paramsHashOf(body: string): string | null {
  try {
    const hash = (JSON.parse(body) as { data?: { params_hash?: unknown } }).data?.params_hash;
    return typeof hash === "string" ? hash : null;
  } catch {
    return null; // verifyChain reports a body that does not parse
  }
}
