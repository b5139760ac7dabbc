// `bench daemon`'s checks after the run, on the daemons' PostgreSQL schema: no budget account spent past
// its limit, and every verdict a client was told found as a decision entry of its session. Read-only.
import pg from "pg";

/** What the clients were told: session → call_number → verdict (fail-closed answers are not verdicts the store gave). */
export class ToldLog {
  readonly #told = new Map<string, Map<number, string>>();
  count = 0;

  add(sessionId: string, callNumber: number, verdict: string): void {
    let calls = this.#told.get(sessionId);
    if (calls === undefined) {
      calls = new Map();
      this.#told.set(sessionId, calls);
    }
    if (!calls.has(callNumber)) this.count++;
    calls.set(callNumber, verdict);
  }

  get sessions(): string[] {
    return [...this.#told.keys()];
  }

  verdict(sessionId: string, callNumber: number): string | undefined {
    return this.#told.get(sessionId)?.get(callNumber);
  }

  *entries(): Generator<[string, number, string]> {
    for (const [s, calls] of this.#told) for (const [n, v] of calls) yield [s, n, v];
  }
}

export interface EndChecks {
  readonly accounts: number;
  /** Accounts whose spent_usd is past limit_usd: zero_overspend says there are none. */
  readonly overspent_accounts: number;
  readonly zero_overspend: boolean;
  readonly told: number;
  readonly told_in_chain: number;
  /** Told, but the session has no decision entry with that call_number, or one with another verdict. */
  readonly told_missing: number;
  readonly told_mismatched: number;
  /** (session, call_number) pairs with more than one decision entry among the told sessions. */
  readonly decided_twice: number;
  /** The tables read as chain: every table of the schema with session_id, kind and body columns. */
  readonly chain_tables: readonly string[];
  readonly every_told_verdict_in_chain: boolean;
}

const ident = (name: string) => `"${name.replace(/"/g, '""')}"`;

/**
 * Looks for every told verdict among the decision entries of its session. It assumes no single chain
 * or head: any table of the schema shaped like a chain (session_id, kind, body) is read, so a store
 * that keeps one chain per shard is checked the same way.
 */
export async function endChecks(connection: string, schema: string, told: ToldLog): Promise<EndChecks> {
  const client = new pg.Client({ connectionString: connection, application_name: "leash_bench_checks" });
  await client.connect();
  try {
    const s = ident(schema);
    const { rows: acc } = await client.query<{ total: string; over: string }>(
      `SELECT count(*) AS total, count(*) FILTER (WHERE spent_usd::numeric > limit_usd::numeric) AS over
         FROM ${s}.leash_budget_accounts`,
    );
    const { rows: tables } = await client.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.columns
        WHERE table_schema = $1 AND column_name IN ('session_id', 'kind', 'body')
        GROUP BY table_name HAVING count(*) = 3 ORDER BY table_name`,
      [schema],
    );
    const found = new Map<string, Map<number, string[]>>();
    for (const { table_name } of tables) {
      const { rows } = await client.query<{ session_id: string; call_number: string; verdict: string }>(
        `SELECT session_id, body::json->'data'->>'call_number' AS call_number,
                body::json->'data'->>'verdict' AS verdict
           FROM ${s}.${ident(table_name)} WHERE kind = 'decision' AND session_id = ANY($1)`,
        [told.sessions],
      );
      for (const r of rows) {
        let calls = found.get(r.session_id);
        if (calls === undefined) {
          calls = new Map();
          found.set(r.session_id, calls);
        }
        const n = Number(r.call_number);
        calls.set(n, [...(calls.get(n) ?? []), r.verdict]);
      }
    }
    let inChain = 0;
    let missing = 0;
    let mismatched = 0;
    for (const [session, n, verdict] of told.entries()) {
      const verdicts = found.get(session)?.get(n);
      if (verdicts === undefined) missing++;
      else if (!verdicts.includes(verdict)) mismatched++;
      else inChain++;
    }
    let twice = 0;
    for (const calls of found.values()) for (const v of calls.values()) if (v.length > 1) twice++;
    const over = Number(acc[0]?.over ?? 0);
    return {
      accounts: Number(acc[0]?.total ?? 0),
      overspent_accounts: over,
      zero_overspend: over === 0,
      told: told.count,
      told_in_chain: inChain,
      told_missing: missing,
      told_mismatched: mismatched,
      decided_twice: twice,
      chain_tables: tables.map((t) => t.table_name),
      every_told_verdict_in_chain: missing === 0 && mismatched === 0 && told.count > 0,
    };
  } finally {
    await client.end();
  }
}
