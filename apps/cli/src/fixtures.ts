// Loads SHACKLE fixture files and checks their envelope: an object with a `fixtures` array of named vectors.
// It does not validate config/state/call (vectors are deliberately odd), run decide, or verify seals.
import { basename } from "node:path";
import { parseJsonKeepingNumberText, parseJsonPreservingNumbers } from "@leash/core";
import { CliError, EXIT_BAD_INPUT, firstLine, type Io, parseJson, readSource, sourceLabel } from "./io.js";

/** One test vector, with its inputs exactly as the file has them. */
export interface Vector {
  readonly name: string;
  /** Position in the file's `fixtures` array, for messages about unnamed trouble. */
  readonly index: number;
  readonly config: unknown;
  readonly state: unknown;
  /** As JSON.parse reads it, except `params`, whose numbers keep their text where a digest needs it. */
  readonly call: unknown;
  readonly expectedVerdict: string;
  readonly expectedReason: string;
  /** Absent on unsealed (pre-SP/1.0.1) vectors; that is not a failure. */
  readonly vectorHash: string | undefined;
  /**
   * The same vector read with each number's text kept (`10.0` stays `10.0`): the seal was
   * computed by Python over those texts, so hashing JSON.parse's `10` would not verify.
   */
  readonly sealSource: unknown;
}

export interface FixtureFile {
  /** As given on the command line. */
  readonly path: string;
  /** The basename, used to name vectors in reports. */
  readonly label: string;
  readonly revision: string | undefined;
  readonly vectors: readonly Vector[];
}

const REQUIRED_INPUTS = ["config", "state", "call"] as const;
const REQUIRED_STRINGS = ["expected_verdict", "expected_reason"] as const;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function envelopeError(path: string, problem: string): CliError {
  return new CliError(`${path}: bad fixture file: ${problem}`, EXIT_BAD_INPUT);
}

/**
 * Checks the envelope of already-read fixture text. Three parses on purpose: JSON.parse
 * gives decide the plain values a JSON reader would, the number-preserving parse gives
 * the seal the exact texts it was computed over, and the params decide hashes come from
 * parseJsonKeepingNumberText (so `1e16` is a float, as the reference read it, not an unsafe int).
 */
export function parseFixtureText(text: string, path: string): FixtureFile {
  const plain = parseJson(text, path);
  let preserved: unknown;
  try {
    preserved = parseJsonPreservingNumbers(text);
  } catch (err) {
    throw new CliError(`${path}: invalid JSON: ${firstLine(err)}`, EXIT_BAD_INPUT, { cause: err });
  }
  if (!isObject(plain) || !isObject(preserved)) {
    throw envelopeError(path, "the top level must be a JSON object");
  }
  const fixtures = plain.fixtures;
  const sealed = preserved.fixtures;
  const kept = parseJsonKeepingNumberText(text) as Record<string, unknown>;
  const keptFixtures = Array.isArray(kept.fixtures) ? kept.fixtures : [];
  if (!Array.isArray(fixtures) || !Array.isArray(sealed)) {
    throw envelopeError(path, "`fixtures` must be an array");
  }
  // An empty run would print "0 passed, 0 failed" and exit 0: a vacuous pass is worse than an error.
  if (fixtures.length === 0) throw envelopeError(path, "`fixtures` is empty");

  const vectors = fixtures.map((fixture: unknown, index): Vector => {
    const at = `fixtures[${index}]`;
    if (!isObject(fixture)) throw envelopeError(path, `${at} must be an object`);
    if (typeof fixture.name !== "string" || fixture.name === "") {
      throw envelopeError(path, `${at}.name must be a non-empty string`);
    }
    const named = `${at} (${fixture.name})`;
    for (const key of REQUIRED_INPUTS) {
      if (!Object.hasOwn(fixture, key)) throw envelopeError(path, `${named} has no \`${key}\``);
    }
    for (const key of REQUIRED_STRINGS) {
      if (typeof fixture[key] !== "string") throw envelopeError(path, `${named}.${key} must be a string`);
    }
    const hash = fixture.vector_hash;
    if (hash !== undefined && typeof hash !== "string") {
      throw envelopeError(path, `${named}.vector_hash must be a string`);
    }
    return {
      name: fixture.name,
      index,
      config: fixture.config,
      state: fixture.state,
      call: withKeptParams(fixture.call, keptFixtures[index]),
      expectedVerdict: fixture.expected_verdict as string,
      expectedReason: fixture.expected_reason as string,
      vectorHash: hash,
      sealSource: sealed[index],
    };
  });

  const revision = typeof plain.revision === "string" ? plain.revision : undefined;
  return { path, label: basename(path), revision, vectors };
}

/** `call` with its params taken from the same vector read by parseJsonKeepingNumberText. */
function withKeptParams(call: unknown, keptFixture: unknown): unknown {
  if (!isObject(call) || !Object.hasOwn(call, "params") || !isObject(keptFixture)) return call;
  const keptCall = keptFixture.call;
  return isObject(keptCall) ? { ...call, params: keptCall.params } : call;
}

/** Reads (a file, or stdin for `-`) and checks one fixture file; every failure is a CliError with exit 2. */
export async function loadFixtureFile(path: string, io: Io): Promise<FixtureFile> {
  const text = await readSource(path, io);
  return parseFixtureText(text, sourceLabel(path));
}
