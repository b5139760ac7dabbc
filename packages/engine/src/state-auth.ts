// State the chain authenticates: every row a transaction changes is stamped with the seq of the entry
// that follows, whose signed data names the row's digest; every row loaded is checked against it. No SQL.
//
// Why: the store's rows (sessions, budget accounts, holds, HITL requests) are what the engine decides
// on, and the chain is the only thing in the store a writer without the key cannot forge. A row whose
// digest is not the one its stamping entry signed was edited behind the engine's back: it is never
// served (the call is DENY fail_closed:state_unverified; `leash recover --repair` rebuilds it). Rows
// stamped before row digests existed (no stamp, or an entry without `row_digests`) are served as before.
// The cost is on loads only (a row the projection lacks): one hash a row, and one entry read and
// signature check per stamping entry, cached by seq. The projection's rows are this engine's own.
import {
  parseEntryBody,
  ROW_DIGESTS_FIELD,
  rowDigest,
  rowDigestsOf,
  rowKey,
  type StateTable,
} from "@leash/chain";
import type { ChainEntryRecord, SubstrateTx } from "@leash/core";
import { LeashError } from "./errors.js";
import type { EvaluateRequest, EvaluateResult } from "./types.js";

/** Past this many cached stamping entries the cache starts afresh (a bound on its memory). */
const DIGESTS_MAX = 4096;

type Stamped = { at_seq?: number | null };

/** Thrown (and turned into DENY fail_closed:state_unverified by evaluate) for a row the chain does not vouch for. */
export class StateUnverifiedError extends LeashError {
  override name = "StateUnverifiedError";
  constructor(
    readonly table: StateTable,
    readonly key: string,
    readonly why: string,
  ) {
    super(
      "state_unverified",
      `the ${table} row ${JSON.stringify(key)} is not the one the chain signed (${why}): it was changed outside Leash; refused until \`leash recover --repair\` rebuilds it from the chain`,
    );
  }
}

/** Checks loaded rows against the entries that stamped them (shared by every transaction of one engine). */
export class StateAuth {
  /** Per stamping seq: the row digests its (verified) entry signed; null for an entry without any. */
  readonly #digests = new Map<number, Readonly<Record<string, string>> | null>();

  /**
   * @param signedByKnownKey whether an entry read on its own is as its signer wrote it
   * @param checkChain throws when the chain itself fails (before a row stamped with a lost entry is blamed)
   */
  constructor(
    private readonly signedByKnownKey: (entry: ChainEntryRecord) => boolean,
    private readonly checkChain: (tx: SubstrateTx) => Promise<void> = async () => {},
  ) {}

  /**
   * `row` when the chain vouches for it (or it predates row digests), else throws
   * StateUnverifiedError. `committedSeq`: the head the transaction opened on; only entries up to it
   * are cached (later ones may be this transaction's, which may yet roll back).
   */
  async check<R extends Stamped>(
    tx: SubstrateTx,
    table: StateTable,
    id: string,
    row: R | null,
    committedSeq: number,
  ): Promise<R | null> {
    if (row === null || row.at_seq === null || row.at_seq === undefined) return row;
    const seq = row.at_seq;
    let digests = this.#digests.get(seq);
    if (digests === undefined) {
      const [entry] = await tx.chain.range(seq, 1);
      if (entry === undefined) await this.checkChain(tx);
      digests = this.#digestsOf(table, id, seq, entry);
      if (seq <= committedSeq) {
        if (this.#digests.size >= DIGESTS_MAX) this.#digests.clear();
        this.#digests.set(seq, digests);
      }
    }
    if (digests === null) return row;
    const signed = digests[rowKey(table, id)];
    if (signed === undefined) {
      throw new StateUnverifiedError(table, id, `entry ${seq}, which its stamp names, does not name it`);
    }
    if (signed !== rowDigest(table, row)) {
      throw new StateUnverifiedError(table, id, `its digest is not the one entry ${seq} signed`);
    }
    return row;
  }

  #digestsOf(
    table: StateTable,
    id: string,
    seq: number,
    entry: ChainEntryRecord | undefined,
  ): Readonly<Record<string, string>> | null {
    if (entry === undefined || entry.seq !== seq) {
      throw new StateUnverifiedError(table, id, `it is stamped with entry ${seq}, which the chain lacks`);
    }
    if (!this.signedByKnownKey(entry)) {
      throw new StateUnverifiedError(table, id, `entry ${seq}, which its stamp names, does not verify`);
    }
    const body = parseEntryBody(entry.body);
    if (typeof body === "string") {
      throw new StateUnverifiedError(table, id, `entry ${seq} does not parse: ${body}`);
    }
    const digests = rowDigestsOf(body.data);
    if (digests === null) {
      throw new StateUnverifiedError(table, id, `entry ${seq} has a malformed ${ROW_DIGESTS_FIELD}`);
    }
    return digests ?? null;
  }
}

/** DENY without a decision or an entry: a row the call needs was edited outside Leash (fail closed). */
export function stateUnverified(request: EvaluateRequest, error: StateUnverifiedError): EvaluateResult {
  return {
    session_id: request.session_id,
    call_number: 0,
    verdict: "DENY",
    reason: "fail_closed:state_unverified",
    budget_remaining_usd: null,
    estimate_usd: null,
    reservation_id: null,
    rng: null,
    params_hash: null,
    repeat_count: 0,
    entry_seq: null,
    entry_hash: null,
    receipt: null,
    state_failure: { table: error.table, key: error.key },
    error: error.message,
  };
}
