// Read-ahead for a group-commit batch: the sessions, budget accounts and chain head (locked) and the nonces
// its queued transactions hinted at, fetched in one round trip before the first of them runs. It decides nothing.
import type { BudgetAccount, ChainEntryRecord, TransactionHints } from "@leash/core";
import type { PoolClient, QueryResult } from "pg";
import { type AccountRow, accountFromRow } from "./budgets.js";
import { type ChainRow, chainEntryFromRow } from "./chain.js";
import { decodeOptionalInt, encodeNonce } from "./codec.js";
import { nonceKey } from "./nonces.js";
import { prefetchedSession } from "./sessions.js";
import type { Statement, Statements } from "./sql.js";
import type { BatchMemory } from "./tx.js";

/** Hints beyond these per transaction are ignored: they are an optimisation, never a promise. */
const MAX_HINTS_PER_TRANSACTION = 16;

/** The distinct, well-formed ids a batch reads ahead; null when there is nothing to read. */
export interface ReadAhead {
  readonly sessionIds: string[];
  readonly nonceSessions: string[];
  readonly nonceJsons: string[];
  readonly accountIds: string[];
  /** Some transaction will read the chain head. */
  readonly chainHead: boolean;
}

/** The read-ahead's answers, in the order its statements were sent. */
export type ReadAheadAnswers = [
  sessions: QueryResult,
  nonces: QueryResult | null,
  accounts: QueryResult | null,
  head: QueryResult | null,
];

/** Text PostgreSQL would refuse (U+0000 aborts the whole batch's transaction): such a hint is skipped. */
function usableText(value: unknown): value is string {
  return typeof value === "string" && value !== "" && !value.includes("\u0000");
}

/**
 * Gathers the hints of the transactions about to run. Anything a store would refuse is left out, so
 * one caller's malformed hint can never fail the statement every transaction of the batch shares:
 * that caller meets its own error, from its own read, as it would have without the hint.
 */
export function collectHints(all: Iterable<TransactionHints | undefined>): ReadAhead | null {
  const sessions = new Set<string>();
  const nonces = new Map<string, [string, string]>();
  const accounts = new Set<string>();
  let chainHead = false;
  for (const hints of all) {
    if (hints === undefined || hints === null || typeof hints !== "object") continue;
    if (Array.isArray(hints.sessions)) {
      for (const id of hints.sessions.slice(0, MAX_HINTS_PER_TRANSACTION)) {
        if (usableText(id)) sessions.add(id);
      }
    }
    if (Array.isArray(hints.nonces)) {
      for (const hint of hints.nonces.slice(0, MAX_HINTS_PER_TRANSACTION)) {
        if (typeof hint !== "object" || hint === null || !usableText(hint.sessionId)) continue;
        let json: string;
        try {
          json = encodeNonce(hint.nonce);
        } catch {
          continue;
        }
        if (json.includes("\u0000")) continue;
        nonces.set(nonceKey(hint.sessionId, json), [hint.sessionId, json]);
      }
    }
    if (Array.isArray(hints.accounts)) {
      for (const id of hints.accounts.slice(0, MAX_HINTS_PER_TRANSACTION)) {
        if (usableText(id)) accounts.add(id);
      }
    }
    if (hints.chainHead === true) chainHead = true;
  }
  if (sessions.size === 0) return null;
  // A nonce is only known under its session's lock, so only nonces of hinted sessions are read.
  const pairs = [...nonces.values()].filter(([sessionId]) => sessions.has(sessionId));
  return {
    sessionIds: [...sessions],
    nonceSessions: pairs.map(([sessionId]) => sessionId),
    nonceJsons: pairs.map(([, json]) => json),
    accountIds: [...accounts],
    chainHead,
  };
}

/**
 * Writes the read-ahead's statements (sessions first, FOR UPDATE; then nonces, whose snapshot is
 * taken once those locks are held; then accounts and the chain head, FOR UPDATE, in the order a
 * decision locks them) and returns their answers. On a pipelined connection all go out at once;
 * otherwise each waits for the one before, as pg requires.
 */
export function sendReadAhead(
  client: PoolClient,
  prepared: boolean,
  sql: Statements,
  ahead: ReadAhead,
  pipelined: boolean,
): Promise<ReadAheadAnswers> {
  const send = (statement: Statement, values: unknown[]) =>
    client.query({ text: statement.text, values, ...(prepared ? { name: statement.name } : {}) });
  const steps: Array<() => Promise<QueryResult> | null> = [
    () => send(sql.sessions.prefetch, [ahead.sessionIds]),
    () =>
      ahead.nonceJsons.length === 0
        ? null
        : send(sql.nonces.prefetch, [ahead.nonceSessions, ahead.nonceJsons]),
    () => (ahead.accountIds.length === 0 ? null : send(sql.accounts.prefetch, [ahead.accountIds])),
    () => (ahead.chainHead ? send(sql.chain.prefetchHead, []) : null),
  ];
  if (!pipelined) {
    return (async () => {
      const answers: Array<QueryResult | null> = [];
      for (const step of steps) answers.push(await step());
      return answers as ReadAheadAnswers;
    })();
  }
  const sent = steps.map((step) => step());
  // All answers are awaited together; a failure of the first must not leave the others unhandled.
  for (const answer of sent) answer?.catch(() => undefined);
  return Promise.all(sent) as Promise<ReadAheadAnswers>;
}

/** Puts what the read-ahead found into the batch's memory; returns how many session rows it holds now. */
export function rememberReadAhead(
  memory: BatchMemory,
  ahead: ReadAhead,
  [sessions, nonces, accounts, head]: ReadAheadAnswers,
): number {
  // Locked FOR UPDATE above, so they stand as read until COMMIT; an absent one is left to its reader.
  for (const row of accounts?.rows ?? []) {
    const account: BudgetAccount = accountFromRow(row as AccountRow);
    memory.accounts.set(account.account_id, account);
    memory.heldAccounts.add(account.account_id);
  }
  const headRow = head?.rows[0] as (ChainRow & { head_seq: unknown; head_hash: string | null }) | undefined;
  if (headRow !== undefined) {
    const seq = decodeOptionalInt(headRow.head_seq, "leash_chain_head.seq");
    memory.head = seq === null || headRow.head_hash === null ? null : { seq, entry_hash: headRow.head_hash };
    const entry: ChainEntryRecord | null =
      memory.head !== null && headRow.entry_id !== null ? chainEntryFromRow(headRow) : null;
    memory.headEntry = entry !== null && entry.entry_hash === memory.head?.entry_hash ? entry : null;
  }
  for (const row of sessions.rows) {
    const entry = prefetchedSession(row as Parameters<typeof prefetchedSession>[0]);
    memory.sessions.set(entry.fields.session_id, entry);
  }
  const recorded = new Set<string>();
  for (const row of nonces?.rows ?? []) {
    recorded.add(nonceKey(String(row.session_id), String(row.nonce_json)));
  }
  for (let i = 0; i < ahead.nonceJsons.length; i++) {
    const sessionId = ahead.nonceSessions[i]!;
    // Only under a lock this batch holds: a session not found was not locked.
    if (!memory.sessions.has(sessionId)) continue;
    const key = nonceKey(sessionId, ahead.nonceJsons[i]!);
    memory.nonces.set(key, recorded.has(key));
  }
  return sessions.rows.length;
}
