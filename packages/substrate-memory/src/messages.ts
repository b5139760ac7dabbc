// The memory substrate's decided-message table: a transaction's inserts and prunes over the committed map.
// Rollback is dropping the overlay; it knows nothing of entries or of how long a row must live.

import { type MessageRecord, type MessageStore, SubstrateError } from "@leash/core";

export const messageKey = (sessionId: string, messageId: string) => `${sessionId}\u0000${messageId}`;

/** Committed records seen through one transaction: `undefined` in #writes is a pruned row. */
export class OverlayMessages {
  readonly #base: Map<string, MessageRecord>;
  readonly #writes = new Map<string, MessageRecord | undefined>();

  constructor(base: Map<string, MessageRecord>) {
    this.#base = base;
  }

  get(key: string): MessageRecord | undefined {
    return this.#writes.has(key) ? this.#writes.get(key) : this.#base.get(key);
  }

  set(key: string, record: MessageRecord | undefined): void {
    this.#writes.set(key, record);
  }

  *entries(): IterableIterator<[string, MessageRecord]> {
    for (const key of this.#base.keys()) {
      const now = this.get(key);
      if (now !== undefined) yield [key, now];
    }
    for (const [key, record] of this.#writes) {
      if (record !== undefined && !this.#base.has(key)) yield [key, record];
    }
  }

  commit(): void {
    for (const [key, record] of this.#writes) {
      if (record === undefined) this.#base.delete(key);
      else this.#base.set(key, record);
    }
  }
}

/** The MessageStore over an overlay; `live` throws once the transaction has ended. */
export function memoryMessageStore(table: OverlayMessages, live: () => void): MessageStore {
  const get = async (sessionId: string, messageId: string) => {
    live();
    const found = table.get(messageKey(sessionId, messageId));
    return found === undefined ? null : { ...found };
  };
  return {
    get,
    async getEach(pairs) {
      const out: (MessageRecord | null)[] = [];
      for (const { sessionId, messageId } of pairs) out.push(await get(sessionId, messageId));
      return out;
    },
    async insert(record) {
      live();
      const key = messageKey(record.session_id, record.message_id);
      if (table.get(key) !== undefined) {
        throw new SubstrateError(
          "conflict",
          `message ${JSON.stringify(record.message_id)} of session ${JSON.stringify(record.session_id)} is already recorded`,
        );
      }
      table.set(key, { ...record });
    },
    async prune(beforeNs, limit) {
      live();
      const old = [...table.entries()]
        .filter(([, record]) => record.sent_ns < beforeNs)
        .sort(([, a], [, b]) => a.sent_ns - b.sent_ns)
        .slice(0, Math.max(0, limit));
      for (const [key] of old) table.set(key, undefined);
      return old.length;
    },
    async count() {
      live();
      let n = 0;
      for (const _ of table.entries()) n++;
      return n;
    },
  };
}
