// How replay compares what it derives with what an entry records: one structural diff of an entry's
// data (in the recorded form: big integers as text), and the mismatch it reports. No fold, no state.
import { ROW_DIGESTS_FIELD } from "@leash/chain";
import type { Nonce } from "@leash/core";
import { counterFormOf, type PolicyRecord, type StoredPolicyRecord, storedRecordOf } from "@leash/engine";

type Data = Record<string, unknown>;

/** Thrown inside the fold, caught by replayChain and reported as the mismatch. */
export class Mismatch extends Error {
  constructor(
    readonly field: string,
    readonly expected: unknown,
    readonly recorded: unknown,
    message: string,
  ) {
    super(message);
  }
}

export const nonceKey = (nonce: Nonce): string => (typeof nonce === "number" ? `n:${nonce}` : `s:${nonce}`);

/** The JSON the chain records for a value (audit entries hold big integers as decimal text). */
export function recordedForm(value: unknown): unknown {
  if (value === null || value === undefined) return null;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) return null;
    return Number.isInteger(value) && !Number.isSafeInteger(value) ? BigInt(value).toString() : value;
  }
  if (Array.isArray(value)) return value.map(recordedForm);
  if (typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(value)) {
      const v = (value as Record<string, unknown>)[k];
      if (v !== undefined) out[k] = recordedForm(v);
    }
    return out;
  }
  return value;
}

/**
 * Whether `folded` (a value replay computed) is what the chain recorded: the recorded form of it,
 * compared in place, without building either's JSON (this runs several times per entry).
 */
export function sameRecorded(folded: unknown, recorded: unknown): boolean {
  if (folded === recorded) return true;
  if (folded === undefined || folded === null) return recorded === null || recorded === undefined;
  if (typeof folded === "number") {
    if (!Number.isFinite(folded)) return recorded === null;
    return (
      Number.isInteger(folded) && !Number.isSafeInteger(folded) && recorded === BigInt(folded).toString()
    );
  }
  if (typeof folded !== "object" || typeof recorded !== "object" || recorded === null) return false;
  if (Array.isArray(folded)) {
    if (!Array.isArray(recorded) || recorded.length !== folded.length) return false;
    for (let i = 0; i < folded.length; i++) if (!sameRecorded(folded[i], recorded[i])) return false;
    return true;
  }
  if (Array.isArray(recorded)) return false;
  const theirs = recorded as Record<string, unknown>;
  let keys = 0;
  for (const key in folded) {
    const value = (folded as Record<string, unknown>)[key];
    if (value === undefined) continue;
    keys++;
    if (!Object.hasOwn(theirs, key) || !sameRecorded(value, theirs[key])) return false;
  }
  return keys === Object.keys(theirs).length;
}

export function expectEqual(field: string, expected: unknown, recorded: unknown): void {
  if (!sameRecorded(expected, recorded)) {
    throw new Mismatch(
      field,
      expected,
      recorded,
      `${field} is ${JSON.stringify(recorded)} in the entry, but the entries before it give ${JSON.stringify(recordedForm(expected))}`,
    );
  }
}

/**
 * The entry's `policy` against the re-derived judgement, both in the stored (compact) form: absent only
 * for a default ALLOW with nothing to say, null when the policy did not run. An older entry's full
 * record compacts to the same, and its `hash` must name the entry's version.
 */
export function expectPolicyRecord(hash: string, judged: PolicyRecord | null, data: Data): void {
  const present = Object.hasOwn(data, "policy");
  const recorded = data.policy as StoredPolicyRecord | null | undefined;
  // An entry from before `counted` is compared in its own shape (full `counter_updates`).
  const form = counterFormOf(recorded);
  const expected = storedRecordOf(judged, form);
  if (present && recorded !== null && typeof recorded === "object" && recorded.hash !== undefined) {
    expectEqual("policy.hash", hash, recorded.hash);
  }
  const normalized =
    present && recorded != null && typeof recorded === "object" ? storedRecordOf(recorded, form) : recorded;
  if ((expected === undefined) !== (normalized === undefined) || !sameRecorded(expected, normalized)) {
    throw new Mismatch(
      "policy",
      expected,
      data.policy,
      `policy is ${present ? JSON.stringify(data.policy) : "absent"} in the entry, but the entries before it give ${expected === undefined ? "none (a default ALLOW)" : JSON.stringify(expected)}`,
    );
  }
}

/** The fields an entry's outcome is compared in first: the first that differs is the one reported. */
export const FIRST = [
  "call_number",
  "params_hash",
  "rng",
  "params_bytes",
  "verdict",
  "reason",
  "reservation_id",
  "budget_before_usd",
  "budget_after_usd",
  "estimate_usd",
];

export interface DiffOptions {
  /** Compare only these fields (an entry folded on its recorded verdict, a stale session's status). */
  readonly only?: readonly string[];
  /** Fields not compared: inputs recorded in an older shape, or compared on their own (policy, state). */
  readonly skip?: ReadonlySet<string>;
}

/**
 * The one structural diff: the entry `derived` (what the machine gives for this entry's command and
 * env) against `recorded`, field by field over both, FIRST's fields first. @throws Mismatch.
 */
export function expectEntry(derived: Data, recorded: Data, options: DiffOptions = {}): void {
  const keys = options.only ?? [...new Set([...FIRST, ...Object.keys(derived), ...Object.keys(recorded)])];
  for (const key of keys) {
    // The row digests are the auditor's stamp of the rows, not the machine's: snapshot-check compares them.
    if (key === ROW_DIGESTS_FIELD || options.skip?.has(key)) continue;
    expectEqual(key, derived[key], recorded[key]);
  }
}
