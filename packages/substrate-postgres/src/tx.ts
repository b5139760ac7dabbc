// One open database transaction as the stores see it: the connection, the SQL, and how it failed.
// It does not begin, commit or retry; transaction() in substrate.ts owns that life cycle.

import { SubstrateError } from "@leash/core";
import type { PoolClient, QueryResult, QueryResultRow } from "pg";
import type { BatchWrites, WriteOwner } from "./batch-writes.js";
import { corkThisTurn } from "./cork.js";
import { sqlState, toSubstrateError } from "./errors.js";
import type { Statement } from "./sql.js";

/** in_failed_sql_transaction: the statement met a transaction an earlier one had aborted. */
const IN_FAILED_TRANSACTION = "25P02";

export class TxContext implements WriteOwner {
  /**
   * The first failure: a statement error (PostgreSQL has aborted the transaction, so COMMIT would
   * roll back), or a write sent without waiting (see `defer`) that did not do what was certain.
   */
  failure: SubstrateError | null = null;
  /**
   * Set when the failure cannot be pinned on this transaction alone (a multi-row write it shared
   * with others failed as a whole): none of them may commit, and each must run again by itself.
   */
  sharedFailure = false;
  /** Set once fn has settled; a store used after that must not run on a connection now lent to someone else. */
  finished = false;
  /**
   * Statements go out one at a time even when fn issues several at once (Promise.all): pg deprecates
   * queueing on a busy client, and COMMIT must come after the last of them. Resolves when the next
   * may be written: after the previous one's answer, or at once after a deferred write.
   */
  private tail: Promise<unknown> = Promise.resolve();
  /** Answers still to come of deferred writes; each records its failure and never rejects. */
  private readonly unanswered = new Set<Promise<void>>();
  /** A BEGIN sent but not yet answered (pipeline mode); resolves to its failure, if any. */
  private pendingBegin: Promise<SubstrateError | null> | null = null;

  constructor(
    private readonly client: PoolClient,
    private readonly prepared: boolean,
    private readonly keyLock: Statement,
    private readonly rowKeyPrefix: string,
    /** The client writes a query without waiting for the answers before it (pg's `pipeline`). */
    private readonly pipelined: boolean,
    /** In a batch on a pipelined connection: where deferred writes wait to go out together. */
    private readonly writes?: BatchWrites,
  ) {}

  /** Records a failure of one of this transaction's deferred writes (the first one counts). */
  fail(problem: SubstrateError): void {
    this.failure ??= problem;
  }

  /** Records a failure this transaction shares with others of its batch (see sharedFailure). */
  failWhole(problem: SubstrateError): void {
    if (this.failure === null) {
      this.failure = problem;
      this.sharedFailure = true;
    }
  }

  /** An answer to wait for before COMMIT (drain), though no statement of this context sent it. */
  track(answer: Promise<void>): void {
    this.unanswered.add(answer);
    void answer.then(() => this.unanswered.delete(answer));
  }

  /**
   * A locked get: FOR UPDATE locks the row when it exists (the common case, one round trip). When it
   * does not, lock its key and look again, since a concurrent insert may have committed meanwhile:
   * the second look takes a fresh READ COMMITTED snapshot after the lock, so it sees that insert,
   * and the key lock keeps the row absent until this transaction ends. On a pipelined connection the
   * key lock and the second look share one round trip: the server runs the look (and takes its
   * snapshot) only once the lock has been granted.
   */
  async lockedRow<R extends QueryResultRow>(
    statement: Statement,
    id: string,
    table: string,
  ): Promise<R | undefined> {
    const first = await this.query<R>(statement, [id]);
    if (first.rows.length > 0) return first.rows[0];
    const key = [this.rowKey(table, id)];
    if (!this.pipelined) {
      await this.query(this.keyLock, key);
      return (await this.query<R>(statement, [id])).rows[0];
    }
    return (await this.queryPair<R>(this.keyLock, key, statement, [id])).rows[0];
  }

  /** The text an insert's key lock is taken on; table names hold no "/", so (table, id) maps one to one. */
  rowKey(table: string, id: string): string {
    return `${this.rowKeyPrefix}${table}/${id}`;
  }

  query<R extends QueryResultRow>(statement: Statement, values: readonly unknown[]): Promise<QueryResult<R>> {
    if (!this.pipelined) {
      const turn = this.tail.then(() => this.send<R>(statement, values));
      this.tail = turn.catch(() => undefined);
      return turn;
    }
    // Pipelined: the next statement may be written as soon as this one is, since answers come back
    // in order; statements fn issues together (Promise.all) then share one round trip. The server
    // still runs them one after another, so a read behind a FOR UPDATE sees what that lock guards.
    // Boxed: an async function returning the bare promise would wait for its answer.
    const written = this.tail.then(async () => {
      await this.preflight(statement);
      return { sent: this.write<R>(statement, values) };
    });
    this.tail = written.catch(() => undefined);
    const answered = written.then(async ({ sent }) => {
      await this.afterBegin([sent]);
      return this.answer(sent, statement.op);
    });
    // drain() must not let COMMIT overtake an answer fn never awaited. The server's answer, not
    // `answered`: answer() itself waits for unanswered writes when this statement fails.
    const settled = written.then(
      ({ sent }) =>
        sent.then(
          () => undefined,
          () => undefined,
        ),
      () => undefined,
    );
    this.unanswered.add(settled);
    void settled.then(() => this.unanswered.delete(settled));
    return answered;
  }

  /**
   * A write whose outcome this transaction's own locks already settle (an update of a row it has
   * locked, an insert of an id it has locked as absent): on a pipelined connection it resolves once
   * written, and the next statement follows without waiting a round trip for an answer known in
   * advance. The answer is still checked: `verify` (the store's own check, such as "not_found" on
   * no row) or a statement error becomes the transaction's failure, which fails it, and a later
   * statement that meets the aborted transaction rethrows that failure. Without pipelining it is a
   * plain query whose `verify` error is thrown.
   */
  defer(
    statement: Statement,
    values: readonly unknown[],
    verify: (result: QueryResult) => SubstrateError | null,
  ): Promise<void> {
    if (!this.pipelined) {
      return this.query(statement, values).then((result) => {
        const problem = verify(result);
        if (problem !== null) throw problem;
      });
    }
    const writes = this.writes;
    if (writes !== undefined) {
      // Held back to go out with the batch's other writes of its kind (see BatchWrites).
      const held = this.tail.then(() => {
        this.assertUsable(statement.op);
        writes.add({ owner: this, statement, values, verify });
      });
      this.tail = held.catch(() => undefined);
      return held;
    }
    const turn = this.tail.then(async () => {
      await this.preflight(statement);
      const sent = this.write(statement, values);
      await this.afterBegin([sent]);
      const answered = sent.then(
        (result) => {
          const problem = verify(result);
          if (problem !== null) this.failure ??= problem;
        },
        (error: unknown) => {
          this.failure ??= toSubstrateError(error, statement.op);
        },
      );
      this.unanswered.add(answered);
      void answered.then(() => this.unanswered.delete(answered));
    });
    this.tail = turn.catch(() => undefined);
    return turn;
  }

  /**
   * For a store answering from what this transaction already read and locked (no statement sent):
   * fails exactly as a statement would once fn has finished or the transaction has failed. Waits
   * for the statements issued before, so answers keep the order of the calls.
   */
  async usable(op: string): Promise<void> {
    await this.tail;
    this.assertUsable(op);
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

  /**
   * Resolves once every statement issued so far has been written (on a pipelined connection, not
   * necessarily answered): what the batch loop sends next (RELEASE, the next transaction) follows them.
   */
  async written(): Promise<void> {
    await this.tail;
  }

  /**
   * Sends this transaction's held-back writes now (see BatchWrites) and waits for the answer of every
   * statement it issued; rejects with the first failure, so a caller learns at its call what a
   * deferred write would otherwise tell only at COMMIT (SubstrateTx.writeBatch).
   */
  async settleWrites(op: string): Promise<void> {
    await this.tail;
    this.assertUsable(op);
    if (this.pendingBegin !== null) await this.settleBegin();
    if (this.failure === null) {
      if (this.pipelined) corkThisTurn(this.client);
      this.writes?.beforeSend(this);
    }
    await this.answers();
    if (this.failure !== null) throw this.failure;
  }

  /** Resolves once every statement issued so far has been answered; transaction() awaits it before COMMIT. */
  async drain(): Promise<void> {
    await this.tail;
    await this.answers();
  }

  private async answers(): Promise<void> {
    while (this.unanswered.size > 0) await Promise.all([...this.unanswered]);
  }

  private assertUsable(op: string): void {
    if (this.finished) {
      throw new SubstrateError("closed", `${op}: the transaction has finished; use stores only inside fn`);
    }
    if (this.failure !== null) {
      // Sending it would only earn "current transaction is aborted"; repeat the real reason instead.
      throw new SubstrateError(this.failure.code, `${op}: the transaction already failed`, {
        cause: this.failure,
      });
    }
  }

  /** Checks before writing a statement; a write waits for a pipelined BEGIN's answer first. */
  private async preflight(statement: Statement): Promise<void> {
    this.assertUsable(statement.op);
    if (this.pendingBegin !== null && !statement.readOnly) {
      await this.settleBegin();
      if (this.failure !== null) throw this.failure;
    }
  }

  private write<R extends QueryResultRow>(statement: Statement, values: readonly unknown[]) {
    if (this.pipelined) corkThisTurn(this.client);
    // Deferred writes held back go out first, so this statement sees them.
    this.writes?.beforeSend(this);
    return this.client.query<R>({
      text: statement.text,
      values: values as unknown[],
      ...(this.prepared ? { name: statement.name } : {}),
    });
  }

  /** After writing: answers arrive in order, so a pipelined BEGIN's comes first; its failure voids the rest. */
  private async afterBegin(sent: readonly Promise<unknown>[]): Promise<void> {
    if (this.pendingBegin === null) return;
    await this.settleBegin();
    if (this.failure !== null) {
      for (const answer of sent) answer.catch(() => undefined);
      throw this.failure;
    }
  }

  private async answer<R extends QueryResultRow>(
    sent: Promise<QueryResult<R>>,
    op: string,
  ): Promise<QueryResult<R>> {
    try {
      return await sent;
    } catch (error) {
      // A deferred write before this one answers first; when it failed, this statement only met
      // the transaction it aborted, and its failure is the one to report.
      await this.answers();
      const own = toSubstrateError(error, op);
      this.failure ??= own;
      throw sqlState(error) === IN_FAILED_TRANSACTION ? this.failure : own;
    }
  }

  private async send<R extends QueryResultRow>(
    statement: Statement,
    values: readonly unknown[],
  ): Promise<QueryResult<R>> {
    await this.preflight(statement);
    const sent = this.write<R>(statement, values);
    await this.afterBegin([sent]);
    return this.answer(sent, statement.op);
  }

  /** Two statements written back to back (pipeline mode only): one round trip, the second's answer returned. */
  private queryPair<R extends QueryResultRow>(
    first: Statement,
    firstValues: readonly unknown[],
    second: Statement,
    secondValues: readonly unknown[],
  ): Promise<QueryResult<R>> {
    const turn = this.tail.then(async () => {
      await this.preflight(first);
      await this.preflight(second);
      const one = this.write(first, firstValues);
      const two = this.write<R>(second, secondValues);
      await this.afterBegin([one, two]);
      try {
        await this.answer(one, first.op);
      } catch (error) {
        // The second ran in the transaction the first aborted: its own error says nothing new.
        two.catch(() => undefined);
        throw error;
      }
      return this.answer(two, second.op);
    });
    this.tail = turn.catch(() => undefined);
    return turn;
  }
}
