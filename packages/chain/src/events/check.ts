// Checks a chain entry's `data` against its kind's JSON Schema (./schemas.ts), with ajv: what
// `leash verify` and the writers' tests run. Node only; it checks no hash, signature or link.
import type { ChainEntryRecord } from "@leash/core";
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import { ROW_DIGESTS_FIELD, rowDigestsProblem } from "../state-rows.js";
import { parseEntryBody } from "../verify/format.js";
import { type ChainEventKind, EVENT_SCHEMAS } from "./schemas.js";
import type { ChainEvent } from "./types.js";

// Every kind with a schema has a type in the union, and the other way round.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : never) : never;
const kindsAgree: Same<ChainEventKind, ChainEvent["kind"]> = true;
void kindsAgree;

/** Why an entry's data does not match its kind's schema. */
export interface EventViolation {
  readonly kind: string;
  /** The version whose schema it was checked against; null for a kind no schema describes. */
  readonly version: number | null;
  /** JSON pointer into the entry's body, e.g. `/data/call_number`. */
  readonly pointer: string;
  readonly message: string;
}

type Compiled = ReadonlyArray<{ version: number; validate: ValidateFunction }>;
let compiled: Map<string, Compiled> | null = null;

function validators(): Map<string, Compiled> {
  if (compiled !== null) return compiled;
  // strictRequired off: an earlier version names the current required fields in `not`, not in properties.
  const ajv = new Ajv({ allErrors: false, allowUnionTypes: true, strict: true, strictRequired: false });
  compiled = new Map(
    Object.entries(EVENT_SCHEMAS).map(([kind, versions]) => [
      kind,
      versions.map((v) => ({ version: v.version, validate: ajv.compile(v.schema) })),
    ]),
  );
  return compiled;
}

export function isChainEventKind(kind: string): kind is ChainEventKind {
  return Object.hasOwn(EVENT_SCHEMAS, kind);
}

/** The first error of `data` against one version, or null when it matches. */
function firstError(version: Compiled[number], data: Record<string, unknown>): ErrorObject | null {
  return version.validate(data) ? null : (version.validate.errors?.[0] ?? null);
}

/**
 * The version and error a failing entry is reported with: its own version field's where it has one
 * (a decision's `replay_inputs`); else the newest's, unless the entry lacks a newer field and an
 * earlier version finds something wrong with a field it has (an older entry, mistyped).
 */
function reported(
  kind: string,
  data: Record<string, unknown>,
  versions: Compiled,
): { version: number; error: ErrorObject | null } {
  if (kind === "decision") {
    // A decision's schema version is its replay_inputs version (v1 also covers entries without it).
    const own = versions.find((v) => v.version === data.replay_inputs) ?? versions.at(-1)!;
    return { version: own.version, error: firstError(own, data) };
  }
  const newest = { version: versions[0]!.version, error: firstError(versions[0]!, data) };
  if (newest.error?.keyword !== "required") return newest;
  for (const earlier of versions.slice(1)) {
    const error = firstError(earlier, data);
    if (error !== null && error.keyword !== "required" && error.keyword !== "not") {
      return { version: earlier.version, error };
    }
  }
  return newest;
}

function pointerOf(error: ErrorObject): string {
  const params = error.params as { missingProperty?: string; additionalProperty?: string };
  const field = params.missingProperty ?? params.additionalProperty;
  return `/data${error.instancePath}${field === undefined ? "" : `/${field.replace(/~/g, "~0").replace(/\//g, "~1")}`}`;
}

function messageOf(error: ErrorObject): string {
  if (error.keyword === "additionalProperties") return "is not a field of this kind";
  if (error.keyword === "required") return "is required";
  return error.message ?? error.keyword;
}

/**
 * Null when `data` matches one version of `kind`'s schema; else the first violation. `row_digests`
 * (state-rows.ts) is a field of every kind's data, checked apart from the kind's own fields.
 */
export function checkEventData(kind: string, data: Record<string, unknown>): EventViolation | null {
  if (Object.hasOwn(data, ROW_DIGESTS_FIELD)) {
    const problem = rowDigestsProblem(data[ROW_DIGESTS_FIELD]);
    const { [ROW_DIGESTS_FIELD]: _, ...own } = data;
    const violation = checkKindData(kind, own);
    if (violation !== null || problem === null) return violation;
    return {
      kind,
      version: eventVersionOf(kind, own),
      pointer: `/data/${ROW_DIGESTS_FIELD}`,
      message: problem,
    };
  }
  return checkKindData(kind, data);
}

function checkKindData(kind: string, data: Record<string, unknown>): EventViolation | null {
  const versions = validators().get(kind);
  if (versions === undefined) {
    return {
      kind,
      version: null,
      pointer: "/kind",
      message: `no schema describes the kind ${JSON.stringify(kind)}`,
    };
  }
  if (versions.some((v) => v.validate(data))) return null;
  const { version, error } = reported(kind, data, versions);
  return {
    kind,
    version,
    pointer: error === null ? "/data" : pointerOf(error),
    message: error === null ? "does not match" : messageOf(error),
  };
}

/**
 * `checkEventData` on a stored entry's body. Null for what is not an entry or whose body does not
 * parse: that is the chain verifier's to report (as `edited`).
 */
export function checkEntryEvent(entry: Pick<ChainEntryRecord, "body"> | null): EventViolation | null {
  if (typeof entry?.body !== "string") return null;
  const body = parseEntryBody(entry.body);
  if (typeof body === "string") return null;
  return checkEventData(body.kind, body.data);
}

/** The schema version `data` of `kind` matches (newest first), or null. */
export function eventVersionOf(kind: string, data: Record<string, unknown>): number | null {
  if (Object.hasOwn(data, ROW_DIGESTS_FIELD)) {
    const { [ROW_DIGESTS_FIELD]: _, ...own } = data;
    return eventVersionOf(kind, own);
  }
  return (
    validators()
      .get(kind)
      ?.find((v) => v.validate(data))?.version ?? null
  );
}

/** An entry's kind and data, typed, when its data matches its kind's schema; else null. */
export function chainEventOf(entry: Pick<ChainEntryRecord, "body">): ChainEvent | null {
  const body = parseEntryBody(entry.body);
  if (typeof body === "string" || checkEventData(body.kind, body.data) !== null) return null;
  return { kind: body.kind, data: body.data } as ChainEvent;
}
