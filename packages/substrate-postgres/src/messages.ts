// The PostgreSQL MessageStore on leash_messages (migration 8): which request messages were decided.
// Its own statements, built per schema; the primary key decides between two daemons racing on one message.
import { type MessageRecord, type MessageStore, SubstrateError } from "@leash/core";
import { decodeInt, encodeInt, encodeText, type TableNames } from "./codec.js";
import { type Statement, statement } from "./sql.js";
import type { TxContext } from "./tx.js";

const COLUMNS = "session_id, message_id, entry_seq, sent_ns";

export type MessageStatements = ReturnType<typeof messageStatements>;

export function messageStatements(t: TableNames) {
  return {
    get: statement(
      "messages.get",
      `SELECT ${COLUMNS} FROM ${t.messages} WHERE session_id = $1 AND message_id = $2`,
    ),
    getEach: statement(
      "messages.getEach",
      `SELECT k.i, m.entry_seq, m.sent_ns FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(session_id, message_id, i)
JOIN ${t.messages} m ON m.session_id = k.session_id AND m.message_id = k.message_id`,
    ),
    // A duplicate waits for the other writer's outcome on the primary key, then inserts nothing:
    // "INSERT 0 0" rather than an error that would abort the caller's transaction.
    insert: statement(
      "messages.insert",
      `INSERT INTO ${t.messages} (${COLUMNS}) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
    ),
    // A batch's records in one statement (SubstrateTx.writeBatch); fewer rows inserted than sent is a clash.
    insertMany: statement(
      "messages.insertMany",
      `INSERT INTO ${t.messages} (${COLUMNS})
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) ON CONFLICT DO NOTHING`,
    ),
    prune: statement(
      "messages.prune",
      `DELETE FROM ${t.messages} WHERE (session_id, message_id) IN (
SELECT session_id, message_id FROM ${t.messages} WHERE sent_ns < $1 ORDER BY sent_ns LIMIT $2)`,
    ),
    count: statement("messages.count", `SELECT count(*) AS n FROM ${t.messages}`),
  } satisfies Record<string, Statement>;
}

function toParams(record: MessageRecord): string[] {
  return [
    encodeText(record.session_id, "session_id"),
    encodeText(record.message_id, "message_id"),
    encodeInt(record.entry_seq, "entry_seq"),
    encodeInt(record.sent_ns, "sent_ns"),
  ];
}

function taken(record: MessageRecord): SubstrateError {
  return new SubstrateError(
    "conflict",
    `message ${JSON.stringify(record.message_id)} of session ${JSON.stringify(record.session_id)} is already recorded`,
  );
}

interface MessageRow {
  session_id: string;
  message_id: string;
  entry_seq: unknown;
  sent_ns: unknown;
}

export class PostgresMessageStore implements MessageStore {
  constructor(
    private readonly tx: TxContext,
    private readonly sql: MessageStatements,
  ) {}

  async get(sessionId: string, messageId: string): Promise<MessageRecord | null> {
    const { rows } = await this.tx.query<MessageRow>(this.sql.get, [
      encodeText(sessionId, "session_id"),
      encodeText(messageId, "message_id"),
    ]);
    const row = rows[0];
    return row === undefined
      ? null
      : {
          session_id: row.session_id,
          message_id: row.message_id,
          entry_seq: decodeInt(row.entry_seq, "entry_seq"),
          sent_ns: decodeInt(row.sent_ns, "sent_ns"),
        };
  }

  async getEach(
    pairs: ReadonlyArray<{ sessionId: string; messageId: string }>,
  ): Promise<(MessageRecord | null)[]> {
    if (pairs.length === 0) return [];
    const sessions = pairs.map((p) => encodeText(p.sessionId, "session_id"));
    const ids = pairs.map((p) => encodeText(p.messageId, "message_id"));
    const { rows } = await this.tx.query<{ i: unknown; entry_seq: unknown; sent_ns: unknown }>(
      this.sql.getEach,
      [sessions, ids],
    );
    const out: (MessageRecord | null)[] = pairs.map(() => null);
    for (const row of rows) {
      const i = decodeInt(row.i, "i") - 1;
      out[i] = {
        session_id: sessions[i]!,
        message_id: ids[i]!,
        entry_seq: decodeInt(row.entry_seq, "entry_seq"),
        sent_ns: decodeInt(row.sent_ns, "sent_ns"),
      };
    }
    return out;
  }

  async insert(record: MessageRecord): Promise<void> {
    const { rowCount } = await this.tx.query(this.sql.insert, toParams(record));
    if (rowCount === 0) throw taken(record);
  }

  /**
   * Every record in one statement, for a batch. A clash (with a stored record, or between two of
   * these) inserts fewer rows than sent: then "conflict", and the caller's transaction must not commit.
   */
  async insertMany(records: readonly MessageRecord[]): Promise<void> {
    if (records.length === 0) return;
    if (records.length === 1) return this.insert(records[0]!);
    const columns = records.map(toParams);
    const { rowCount } = await this.tx.query(
      this.sql.insertMany,
      [0, 1, 2, 3].map((i) => columns.map((row) => row[i])),
    );
    if (rowCount !== records.length) {
      const clashes = records.length - (rowCount ?? 0);
      throw new SubstrateError(
        "conflict",
        `${clashes} of the batch's ${records.length} messages are already recorded`,
      );
    }
  }

  async prune(beforeNs: number, limit: number): Promise<number> {
    const { rowCount } = await this.tx.query(this.sql.prune, [
      encodeInt(beforeNs, "beforeNs"),
      encodeInt(Math.max(0, limit), "limit"),
    ]);
    return rowCount ?? 0;
  }

  async count(): Promise<number> {
    const { rows } = await this.tx.query<{ n: unknown }>(this.sql.count, []);
    return decodeInt(rows[0]?.n ?? 0, "n");
  }
}
