// One open database transaction as the stores see it: the connection, the SQL, and how it failed.
// It does not begin, commit or retry; transaction() in substrate.ts owns that life cycle.

import { SubstrateError } from "@leash/core";
import type { PoolClient, QueryResult, QueryResultRow } from "pg";
import { toSubstrateError } from "./errors.js";
import type { Statement } from "./sql.js";

export class TxContext {
  /** The first statement error: PostgreSQL has aborted the transaction, so COMMIT would roll back. */
  failure: SubstrateError | null = null;
  /** Set once fn has settled; a store used after that must not run on a connection now lent to someone else. */
  finished = false;
  /**
   * Statements run one at a time even when fn issues several at once (Promise.all): pg deprecates
   * queueing on a busy client, and COMMIT must come after the last of them.
   */
  private tail: Promise<unknown> = Promise.resolve();
  /** A BEGIN sent but not yet answered (pipeline mode); resolves to its failure, if any. */
  private pendingBegin: Promise<SubstrateError | null> | null = null;

  constructor(
    private readonly client: PoolClient,
    private readonly prepared: boolean,
    private readonly keyLock: Statement,
    private readonly rowKeyPrefix: string,
  ) {}

  /**
   * A locked get: FOR UPDATE locks the row when it exists (the common case, one round trip). When it
   * does not, lock its key and look again, since a concurrent insert may have committed meanwhile:
   * the re-read takes a fresh READ COMMITTED snapshot after the lock, so it sees that insert.
   */
  async lockedRow<R extends QueryResultRow>(
    statement: Statement,
    id: string,
    table: string,
  ): Promise<R | undefined> {
    const first = await this.query<R>(statement, [id]);
    if (first.rows.length > 0) return first.rows[0];
    await this.query(this.keyLock, [this.rowKey(table, id)]);
    return (await this.query<R>(statement, [id])).rows[0];
  }

  /** The text an insert's key lock is taken on; table names hold no "/", so (table, id) maps one to one. */
  rowKey(table: string, id: string): string {
    return `${this.rowKeyPrefix}${table}/${id}`;
  }

  query<R extends QueryResultRow>(statement: Statement, values: readonly unknown[]): Promise<QueryResult<R>> {
    const turn = this.tail.then(() => this.send<R>(statement, values));
    this.tail = turn.catch(() => undefined);
    return turn;
  }

  /**
   * Takes a BEGIN already written to a pipelined connection, so the first statement can follow it
   * without waiting a round trip. Only a read may: if BEGIN failed, that read ran on its own and
   * left nothing behind, whereas a write would have committed by itself.
   */
  pipelineBegin(begin: Promise<unknown>): void {
    this.pendingBegin = begin.then(
      () => null,
      (error: unknown) => toSubstrateError(error, "transaction: BEGIN"),
    );
  }

  /** Waits for a pipelined BEGIN's answer and records its failure; never throws. */
  async settleBegin(): Promise<void> {
    const pending = this.pendingBegin;
    if (pending === null) return;
    this.pendingBegin = null;
    const failure = await pending;
    if (failure !== null) this.failure ??= failure;
  }

  /** Resolves once every statement issued so far has finished; transaction() awaits it before COMMIT. */
  async drain(): Promise<void> {
    await this.tail;
  }

  private async send<R extends QueryResultRow>(
    statement: Statement,
    values: readonly unknown[],
  ): Promise<QueryResult<R>> {
    if (this.finished) {
      throw new SubstrateError(
        "closed",
        `${statement.op}: the transaction has finished; use stores only inside fn`,
      );
    }
    if (this.failure !== null) {
      // Sending it would only earn "current transaction is aborted"; repeat the real reason instead.
      throw new SubstrateError(this.failure.code, `${statement.op}: the transaction already failed`, {
        cause: this.failure,
      });
    }
    if (this.pendingBegin !== null && !statement.readOnly) {
      await this.settleBegin();
      if (this.failure !== null) throw this.failure;
    }
    const sent = this.client.query<R>({
      text: statement.text,
      values: values as unknown[],
      ...(this.prepared ? { name: statement.name } : {}),
    });
    if (this.pendingBegin !== null) {
      // Answers arrive in order, so BEGIN's comes first; a failed BEGIN voids the read behind it.
      await this.settleBegin();
      if (this.failure !== null) {
        sent.catch(() => undefined);
        throw this.failure;
      }
    }
    try {
      return await sent;
    } catch (error) {
      const failure = toSubstrateError(error, statement.op);
      this.failure ??= failure;
      throw failure;
    }
  }
}
