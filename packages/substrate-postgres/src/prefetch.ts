// Read-ahead for a group-commit batch: the sessions (locked) and nonces its queued transactions hinted
// at, fetched in one round trip before the first of them runs. It decides nothing; the stores answer from it.
import type { TransactionHints } from "@leash/core";
import type { PoolClient, QueryResult } from "pg";
import { encodeNonce } from "./codec.js";
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
}

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
  }
  if (sessions.size === 0) return null;
  // A nonce is only known under its session's lock, so only nonces of hinted sessions are read.
  const pairs = [...nonces.values()].filter(([sessionId]) => sessions.has(sessionId));
  return {
    sessionIds: [...sessions],
    nonceSessions: pairs.map(([sessionId]) => sessionId),
    nonceJsons: pairs.map(([, json]) => json),
  };
}

/**
 * Writes the read-ahead's statements (sessions first, FOR UPDATE; then nonces, whose snapshot is
 * taken once those locks are held) and returns their answers. On a pipelined connection both go out
 * at once; otherwise the second waits for the first, as pg requires.
 */
export function sendReadAhead(
  client: PoolClient,
  prepared: boolean,
  sql: Statements,
  ahead: ReadAhead,
  pipelined: boolean,
): Promise<[QueryResult, QueryResult | null]> {
  const send = (statement: Statement, values: unknown[]) =>
    client.query({ text: statement.text, values, ...(prepared ? { name: statement.name } : {}) });
  const sessions = send(sql.sessions.prefetch, [ahead.sessionIds]);
  const readNonces = () =>
    ahead.nonceJsons.length === 0
      ? Promise.resolve(null)
      : send(sql.nonces.prefetch, [ahead.nonceSessions, ahead.nonceJsons]);
  if (!pipelined) return sessions.then(async (found) => [found, await readNonces()]);
  const nonces = readNonces();
  // Both answers are awaited together; a failure of the first must not leave the second unhandled.
  nonces.catch(() => undefined);
  return Promise.all([sessions, nonces]);
}

/** Puts what the read-ahead found into the batch's memory; returns how many session rows it holds now. */
export function rememberReadAhead(
  memory: BatchMemory,
  ahead: ReadAhead,
  [sessions, nonces]: [QueryResult, QueryResult | null],
): number {
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
