// The SQLite MessageStore: decided request messages in leash_messages (schema.ts, version 8).
// It runs inside the substrate's transaction; the primary key refuses a second record of one message.

import type { MessageRecord, MessageStore } from "@leash/core";
import { checkedInteger, text } from "./codec.js";
import type { SqliteTx } from "./stores.js";

interface MessageRow {
  session_id: string;
  message_id: string;
  entry_seq: number;
  sent_ns: number;
}

const rowToMessage = (row: MessageRow): MessageRecord => ({
  session_id: row.session_id,
  message_id: row.message_id,
  entry_seq: row.entry_seq,
  sent_ns: row.sent_ns,
});

export class SqliteMessages implements MessageStore {
  constructor(readonly tx: SqliteTx) {}

  async get(sessionId: string, messageId: string): Promise<MessageRecord | null> {
    const row = this.tx.exec("messages.get", (st) =>
      st("SELECT * FROM leash_messages WHERE session_id = ? AND message_id = ?").get(
        text("session_id", sessionId),
        text("message_id", messageId),
      ),
    ) as MessageRow | undefined;
    return row === undefined ? null : rowToMessage(row);
  }

  // One statement a pair: on SQLite each is a library call in this process, not a round trip.
  async getEach(
    pairs: ReadonlyArray<{ sessionId: string; messageId: string }>,
  ): Promise<(MessageRecord | null)[]> {
    const out: (MessageRecord | null)[] = [];
    for (const { sessionId, messageId } of pairs) out.push(await this.get(sessionId, messageId));
    return out;
  }

  async insert(record: MessageRecord): Promise<void> {
    const row = {
      session_id: text("session_id", record.session_id),
      message_id: text("message_id", record.message_id),
      entry_seq: checkedInteger("entry_seq", record.entry_seq),
      sent_ns: checkedInteger("sent_ns", record.sent_ns),
    };
    this.tx.exec("messages.insert", (st) =>
      st(
        `INSERT INTO leash_messages (session_id, message_id, entry_seq, sent_ns)
         VALUES (@session_id, @message_id, @entry_seq, @sent_ns)`,
      ).run(row),
    );
  }

  async prune(beforeNs: number, limit: number): Promise<number> {
    const { changes } = this.tx.exec("messages.prune", (st) =>
      st(
        `DELETE FROM leash_messages WHERE (session_id, message_id) IN (
           SELECT session_id, message_id FROM leash_messages WHERE sent_ns < ? ORDER BY sent_ns LIMIT ?)`,
      ).run(checkedInteger("beforeNs", beforeNs), Math.max(0, checkedInteger("limit", limit))),
    );
    return changes;
  }

  async count(): Promise<number> {
    const row = this.tx.exec("messages.count", (st) =>
      st("SELECT COUNT(*) AS n FROM leash_messages").get(),
    ) as { n: number };
    return row.n;
  }
}
