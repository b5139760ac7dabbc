// A group-commit batch's deferred writes held back and sent together, one multi-row statement per kind,
// and the lazy savepoints that allows. It decides no outcome: each write is still checked by its store.
import type { SubstrateError } from "@leash/core";
import type { PoolClient, QueryResult } from "pg";
import type { TableNames } from "./codec.js";
import { corkThisTurn, uncorkNow } from "./cork.js";
import { toSubstrateError } from "./errors.js";
import { type Statement, statement } from "./sql.js";

/*
 * The speed trick this module and TxContext.defer (tx.ts) carry, with no hint from the caller
 * (the port has none since leash-substrate-v5): a write whose outcome the transaction's own locks,
 * or its batch's, already settle is not waited for, and in a batch it waits here to go out with
 * the others of its kind. Which writes qualify each store decides from what the transaction did
 * itself: an update of a row it read FOR UPDATE; an insert of an id it found absent under its key
 * lock (KeyedRows, budget accounts, sessions); a nonce the batch found absent (nonces.ts: the
 * batch lock keeps every other Leash writer out); the outbox item of an entry it appended after the
 * head it holds (outbox.ts). Rows read or written by a released transaction are handed to the next
 * ones of the batch (BatchMemory, batch-memory.ts), so those often send no statement at all.
 * What it buys: no round trip per write, one statement per table per batch instead of one per
 * write, and no savepoint for a transaction that sends nothing.
 * What it costs: a deferred write that fails anyway (only a writer that bypasses Leash can make one
 * clash) fails its transaction when it ends, not at its call; after its savepoint was released, the
 * whole batch is rolled back and the others run again; a multi-row statement refused as a whole
 * makes each of its transactions run again alone. And this code: every store must tell which of
 * its writes its locks settle, and get that right.
 */

/**
 * What a held-back write reports to the transaction that issued it (TxContext, tx.ts, is the one
 * implementation); named here so this module does not import tx.ts, which imports it.
 */
export interface WriteOwner {
  /** Records a failure of one of its own writes (the first one counts). */
  fail(problem: SubstrateError): void;
  /** Records a failure it shares with the other transactions of one multi-row write. */
  failWhole(problem: SubstrateError): void;
  /** An answer to wait for before its COMMIT. */
  track(answer: Promise<void>): void;
}

/** A write the store sent without waiting (see TxContext.defer), and how to tell whether it did its job. */
interface Entry {
  readonly owner: WriteOwner;
  readonly statement: Statement;
  readonly values: readonly unknown[];
  readonly verify: (result: QueryResult) => SubstrateError | null;
}

/**
 * How several writes of one kind become one statement: the values, column by column, as arrays for
 * unnest(); `key` names a row in `values` and in a returned row, so each write learns whether its
 * row was written. Updates keep the last write of each row (each sets every column).
 */
interface MultiRow {
  readonly statement: Statement;
  readonly columns: number;
  /** How a write's values become the array elements (account_ids, a list, travels as JSON text). */
  readonly element?: (value: unknown, column: number) => unknown;
  readonly key: (values: readonly unknown[]) => string;
  readonly returned: (row: Record<string, unknown>) => string;
  readonly update: boolean;
}

/**
 * Which single-row statements have a multi-row form, by the single one's op. The multi-row inserts
 * carry only writes the transaction's locks vouch for (an id found absent, a new seq), so they take
 * no ON CONFLICT clause: it makes the server insert speculatively (a second index probe and a token
 * per row) to guard against a clash the locks already rule out, and a clash, never expected, fails the statement, after which the batch's transactions run again one by
 * one (substrate.ts), where each single-row form, ON CONFLICT and all, tells whose write clashed.
 * (Chain appends keep it: see multiAppendStatement.)
 */
export type MultiRowStatements = ReadonlyMap<string, MultiRow>;

const unnest = (types: readonly string[]) => types.map((type, i) => `$${i + 1}::${type}[]`).join(", ");

/**
 * The multi-row form of a store's full-row UPDATE: `columns` in the single form's parameter order,
 * the key first, each as [name, type of its array, cast of the column if not that type].
 */
function multiRowUpdate(
  op: string,
  table: string,
  columns: ReadonlyArray<readonly [string, string, string?]>,
): [string, MultiRow] {
  const [key] = columns[0]!;
  const set = columns
    .slice(1)
    .map(([name, , cast]) => `${name} = u.${name}${cast === undefined ? "" : `::${cast}`}`)
    .join(", ");
  return [
    op,
    {
      statement: statement(
        `${op}(multi)`,
        `UPDATE ${table} AS target SET ${set}
FROM unnest(${unnest(columns.map(([, type]) => type))}) AS u(${columns.map(([name]) => name).join(", ")})
WHERE target.${key} = u.${key} RETURNING target.${key}`,
      ),
      columns: columns.length,
      key: (values) => String(values[0]),
      returned: (row) => String(row[key]),
      update: true,
    },
  ];
}

export function multiRowStatements(t: TableNames): MultiRowStatements {
  const keyOf =
    (...columns: number[]) =>
    (values: readonly unknown[]) =>
      columns.map((c) => String(values[c])).join("\u0000");
  const entries: Array<[string, MultiRow]> = [
    [
      "outbox.enqueue",
      {
        statement: statement(
          "outbox.enqueue(multi)",
          `INSERT INTO ${t.outbox} (seq, entry_id, session_id, status, attempts, created_ns)
SELECT u.seq, u.entry_id, u.session_id, 'PENDING', 0, u.created_ns
FROM unnest(${unnest(["bigint", "text", "text", "bigint"])}) AS u(seq, entry_id, session_id, created_ns)
RETURNING seq`,
        ),
        columns: 4,
        key: keyOf(0),
        returned: (row) => String(row.seq),
        update: false,
      },
    ],
    [
      "reservations.insert",
      {
        // Each row's key lock first, as the single-row insert takes it (see sql.ts insert()).
        statement: statement(
          "reservations.insert(multi)",
          `INSERT INTO ${t.reservations} (reservation_id, account_ids, session_id, call_number, amount_usd,
actual_usd, status, idempotency_key, created_ns, expires_ns, resolved_ns, at_seq)
SELECT u.reservation_id,
  ARRAY(SELECT a.id FROM jsonb_array_elements_text(u.account_ids::jsonb) WITH ORDINALITY AS a(id, n) ORDER BY a.n),
  u.session_id, u.call_number, u.amount_usd, u.actual_usd, u.status, u.idempotency_key, u.created_ns,
  u.expires_ns, u.resolved_ns, u.at_seq
FROM unnest(${unnest(["text", "text", "text", "bigint", "text", "text", "text", "text", "bigint", "bigint", "bigint", "bigint", "text"])})
  AS u(reservation_id, account_ids, session_id, call_number, amount_usd, actual_usd, status, idempotency_key,
  created_ns, expires_ns, resolved_ns, at_seq, lock_key)
CROSS JOIN LATERAL (SELECT pg_advisory_xact_lock(hashtextextended(u.lock_key, 0))) AS key_lock
RETURNING reservation_id`,
        ),
        columns: 13,
        element: (value, column) => (column === 1 ? JSON.stringify(value) : value),
        key: keyOf(0),
        returned: (row) => String(row.reservation_id),
        update: false,
      },
    ],
    multiRowUpdate("accounts.update", t.accounts, [
      ["account_id", "text"],
      ["scope", "text"],
      ["parent_id", "text"],
      ["limit_usd", "text"],
      ["spent_usd", "text"],
      ["reserved_usd", "text"],
      ["created_ns", "bigint"],
      ["updated_ns", "bigint"],
      ["at_seq", "bigint"],
    ]),
    multiRowUpdate("sessions.update", t.sessions, [
      ["session_id", "text"],
      ["agent_id", "text"],
      ["organization_id", "text"],
      ["status", "text"],
      ["config", "text", "jsonb"],
      ["state", "text", "jsonb"],
      ["call_count", "bigint"],
      ["created_ns", "bigint"],
      ["updated_ns", "bigint"],
      ["at_seq", "bigint"],
    ]),
  ];
  return new Map(entries);
}

/**
 * Contiguous chain appends as one statement: the head is checked against the first, every row is
 * inserted, and the head moves to the last one written. Unlike the multi-row inserts above it keeps
 * ON CONFLICT: entry ids (and spent nonces) of one batch may clash with each other, and which
 * transaction's entry would clash when they all ran again one by one depends on their order;
 * skipped here, the clashing row is pinned on its own transaction (its check fails, and with it the
 * batch before COMMIT; the others run again). A nonce found in the read-only nonce table skips its
 * row the same way.
 */
export function multiAppendStatement(t: TableNames): Statement {
  return statement(
    "chain.append(multi)",
    `WITH head AS (
  SELECT seq FROM ${t.chainHead} WHERE id = 1 FOR UPDATE
), added AS (
  INSERT INTO ${t.chain} (seq, entry_id, entry_hash, prev_hash, body, signature, key_id, kind, session_id, created_ns, nonce)
  SELECT u.* FROM unnest(${unnest(["bigint", "text", "text", "text", "text", "text", "text", "text", "text", "bigint", "text"])})
    AS u(seq, entry_id, entry_hash, prev_hash, body, signature, key_id, kind, session_id, created_ns, nonce), head
  WHERE coalesce(head.seq, -1) = ($1::bigint[])[1] - 1
    AND (u.nonce IS NULL OR NOT EXISTS
      (SELECT FROM ${t.nonces} AS n WHERE n.session_id = u.session_id AND n.nonce_json = u.nonce))
  ON CONFLICT DO NOTHING
  RETURNING seq, entry_hash
), moved AS (
  UPDATE ${t.chainHead} AS h SET seq = last.seq, entry_hash = last.entry_hash
  FROM (SELECT seq, entry_hash FROM added ORDER BY seq DESC LIMIT 1) AS last
  WHERE h.id = 1 RETURNING 1
)
SELECT (SELECT count(*) FROM head) AS heads, (SELECT seq FROM head) AS head_seq,
  ARRAY(SELECT seq::text FROM added) AS added`,
  );
}

/** A result of the single-row form's shape, for one write of a multi-row statement. */
function resultOf(rowCount: number, rows: unknown[] = []): QueryResult {
  return { rowCount, rows, command: "", oid: 0, fields: [] } as unknown as QueryResult;
}

/**
 * The deferred writes of one batch (pipelined connections only), and its savepoints. A write waits
 * here until some statement has to go out after it (it may read what the write wrote) or the batch
 * ends; then the writes go out grouped. A transaction takes its savepoint only when it first sends
 * a statement, after the writes of those before it, so a rollback to it cannot take those along;
 * one that sends nothing (its reads answered from the batch's memory) needs none: should it fail,
 * its held-back writes are simply dropped.
 */
export class BatchWrites {
  #entries: Entry[] = [];
  /** The transaction whose savepoint is open, if any: only it has sent statements since. */
  #savepointOf: WriteOwner | null = null;
  /** Write statements sent and not yet answered. */
  #inFlight = 0;
  constructor(
    private readonly client: PoolClient,
    private readonly prepared: boolean,
    private readonly multi: MultiRowStatements,
    private readonly chainAppend: { single: string; multi: Statement },
    private readonly savepoint: string,
    /** Told how many rows each multi-row statement carries, for the substrate's counters. */
    private readonly counted: (rows: number) => void,
    /**
     * Sends a savepoint statement whose answer the batch checks before COMMIT; null for a
     * transaction of its own (see `solo`), which takes no savepoints: should it fail, it rolls back whole.
     */
    private readonly control: ((text: string) => void) | null,
  ) {}

  /**
   * The held-back writes of a transaction run by itself (no batch): the same grouping into one
   * statement a kind, without savepoints. What it buys: SubstrateTx.writeBatch's rows of a kind go
   * out as one statement, and other deferred writes wait for the next statement to go with it.
   */
  static solo(
    client: PoolClient,
    prepared: boolean,
    multi: MultiRowStatements,
    chainAppend: { single: string; multi: Statement },
    counted: (rows: number) => void,
  ): BatchWrites {
    return new BatchWrites(client, prepared, multi, chainAppend, "", counted, null);
  }

  add(entry: Entry): void {
    this.#entries.push(entry);
  }

  /** Forgets the writes of a transaction that failed. */
  drop(owner: WriteOwner): void {
    this.#entries = this.#entries.filter((e) => e.owner !== owner);
  }

  /**
   * Called (synchronously, in order) before `owner` sends any statement. The first time, the writes
   * of the transactions before it go out (outside any savepoint), then its savepoint is taken; its
   * own held-back writes go out inside it, so that statement sees them.
   */
  beforeSend(owner: WriteOwner): void {
    if (this.control !== null && this.#savepointOf !== owner) {
      // It has sent nothing yet, so everything here not its own belongs to released transactions.
      const others = this.#entries.filter((e) => e.owner !== owner);
      this.#entries = this.#entries.filter((e) => e.owner === owner);
      this.#send(others);
      this.control(`SAVEPOINT ${this.savepoint}`);
      this.#savepointOf = owner;
    }
    const own = this.#entries;
    this.#entries = [];
    this.#send(own);
  }

  /**
   * A transaction of the batch has ended: its savepoint, if it took one, is released (success) or
   * rolled back and released (failure, which also drops what it held back).
   */
  endTransaction(owner: WriteOwner, ok: boolean): void {
    if (!ok) this.drop(owner);
    if (this.control !== null && this.#savepointOf === owner) {
      this.#savepointOf = null;
      this.control(
        ok
          ? `RELEASE SAVEPOINT ${this.savepoint}`
          : `ROLLBACK TO SAVEPOINT ${this.savepoint}; RELEASE SAVEPOINT ${this.savepoint}`,
      );
    }
    // Between transactions nothing is open, so what is held may go out now, and does when the
    // server has nothing left to do (it then works on these rows while the next transactions run).
    // Otherwise the rows gather: answers are read only when the event loop turns, which a batch
    // answering from memory may not let it do until its end, and flushing every few transactions
    // regardless would split the batch's rows into more statements, each parsed and planned, and set
    // the server working while this process still has transactions to run on the same CPUs.
    if (this.#inFlight === 0) {
      this.flush();
      uncorkNow(this.client);
    }
  }

  /** Sends everything still held; the batch calls it before checking answers and COMMIT. */
  flush(): void {
    const all = this.#entries;
    this.#entries = [];
    this.#send(all);
  }

  #query(statement: Statement, values: unknown[]): Promise<QueryResult> {
    this.#inFlight++;
    const sent = this.client.query({
      text: statement.text,
      values,
      ...(this.prepared ? { name: statement.name } : {}),
    });
    const done = () => {
      this.#inFlight--;
    };
    sent.then(done, done);
    return sent;
  }

  /**
   * Inserts first (single-row kinds in their order, then the multi-row kinds), then updates (the
   * same): no write depends on one of another table, and within a table an insert precedes the
   * updates of its row.
   */
  #send(entries: readonly Entry[]): void {
    if (entries.length === 0) return;
    // One burst, one write to the socket (and one wake-up of the server), not one per statement.
    corkThisTurn(this.client);
    const byKind = new Map<string, Entry[]>();
    const singleInserts: Entry[] = [];
    const singleUpdates: Entry[] = [];
    for (const entry of entries) {
      const op = entry.statement.op;
      if (this.multi.has(op) || op === this.chainAppend.single) {
        const list = byKind.get(op);
        if (list === undefined) byKind.set(op, [entry]);
        else list.push(entry);
      } else if (op.endsWith(".insert")) {
        singleInserts.push(entry);
      } else {
        singleUpdates.push(entry);
      }
    }
    for (const entry of singleInserts) this.#sendOne(entry);
    for (const [op, list] of byKind) {
      if (op === this.chainAppend.single) this.#sendAppends(list);
      else if (!this.multi.get(op)!.update) this.#sendMulti(this.multi.get(op)!, list);
    }
    for (const entry of singleUpdates) this.#sendOne(entry);
    for (const [op, list] of byKind) {
      const multi = this.multi.get(op);
      if (multi?.update) this.#sendMulti(multi, list);
    }
  }

  #sendOne(entry: Entry): void {
    const answer = this.#query(entry.statement, entry.values as unknown[]).then(
      (result) => {
        const problem = entry.verify(result);
        if (problem !== null) entry.owner.fail(problem);
      },
      (error: unknown) => entry.owner.fail(toSubstrateError(error, entry.statement.op)),
    );
    entry.owner.track(answer);
  }

  #sendMulti(multi: MultiRow, list: readonly Entry[]): void {
    if (list.length === 1) {
      this.#sendOne(list[0]!);
      return;
    }
    // Updates: the last write of each row is the one to send; the earlier ones learn from it.
    const rows = multi.update ? [...new Map(list.map((e) => [multi.key(e.values), e])).values()] : list;
    const columns = Array.from({ length: multi.columns }, (_, c) =>
      rows.map((e) => (multi.element ? multi.element(e.values[c], c) : e.values[c])),
    );
    this.counted(rows.length);
    const owners = [...new Set(list.map((e) => e.owner))];
    const answer = this.#query(multi.statement, columns).then(
      (result) => {
        const written = new Set(result.rows.map((row) => multi.returned(row)));
        for (const entry of list) {
          const key = multi.key(entry.values);
          const count = written.has(key) ? 1 : 0;
          // An insert's row is written once: a later write of the same key found it taken.
          if (!multi.update) written.delete(key);
          const problem = entry.verify(resultOf(count > 0 ? 1 : 0));
          if (problem !== null) entry.owner.fail(problem);
        }
      },
      (error: unknown) => {
        // Whose row the server refused cannot be told: none of these transactions may commit now.
        const failure = toSubstrateError(error, multi.statement.op);
        for (const owner of owners) owner.failWhole(failure);
      },
    );
    for (const owner of owners) owner.track(answer);
  }

  #sendAppends(list: readonly Entry[]): void {
    const seqs = list.map((e) => Number(e.values[0]));
    const contiguous = seqs.every((seq, i) => i === 0 || seq === seqs[i - 1]! + 1);
    if (list.length === 1 || !contiguous) {
      for (const entry of list) this.#sendOne(entry);
      return;
    }
    const columns = Array.from({ length: 11 }, (_, c) => list.map((e) => e.values[c]));
    this.counted(list.length);
    const owners = [...new Set(list.map((e) => e.owner))];
    const answer = this.#query(this.chainAppend.multi, columns).then(
      (result) => {
        const row = result.rows[0] as { heads: unknown; head_seq: unknown; added: string[] } | undefined;
        const added = new Set(row?.added ?? []);
        // The head matched the first entry when anything was added: a row left out clashed by id
        // or by nonce (spent unknown: the single form's answer would say which).
        const headMatched = added.size > 0;
        for (const entry of list) {
          const seq = String(entry.values[0]);
          const single = added.has(seq)
            ? { heads: 1, head_seq: Number(seq) - 1, moved: 1 }
            : {
                heads: row?.heads ?? 0,
                head_seq: headMatched ? Number(seq) - 1 : (row?.head_seq ?? null),
                moved: 0,
                spent: null,
              };
          const problem = entry.verify(resultOf(1, [single]));
          if (problem !== null) entry.owner.fail(problem);
        }
      },
      (error: unknown) => {
        const failure = toSubstrateError(error, this.chainAppend.multi.op);
        for (const owner of owners) owner.failWhole(failure);
      },
    );
    for (const owner of owners) owner.track(answer);
  }
}
