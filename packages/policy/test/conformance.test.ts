// The cel-spec conformance suites for the parts of CEL a policy condition uses, run the way a rule's `when`
// runs: @bufbuild/cel's parser, our checker (type and cost), @bufbuild/cel's planner. Values must match.
import { celUint, isCelError } from "@bufbuild/cel";
import { tests } from "@bufbuild/cel-spec/testdata/conformance.js";
import type {
  SerializedIncrementalTest,
  SerializedIncrementalTestSuite,
} from "@bufbuild/cel-spec/testdata/tests.js";
import { describe, expect, it } from "vitest";
import { checkAndRun } from "../src/condition.js";

/** The suites whose features a policy condition has (no protobuf messages, no extensions). */
const SUBSET = [
  "basic/self_eval_zeroish",
  "basic/self_eval_nonzeroish",
  "basic/functions",
  "comparisons/eq_literal",
  "comparisons/ne_literal",
  "comparisons/lt_literal",
  "comparisons/gt_literal",
  "comparisons/lte_literal",
  "comparisons/gte_literal",
  "comparisons/in_list_literal",
  "comparisons/in_map_literal",
  "conversions/int",
  "conversions/double",
  "conversions/string",
  "conversions/bool",
  "fields/map_fields",
  "fields/map_has",
  "fields/in",
  "fields/quoted_map_fields",
  "integer_math/int64_math",
  "fp_math/fp_math",
  "lists/concatenation",
  "lists/index",
  "lists/in",
  "lists/size",
  "logic/conditional",
  "logic/AND",
  "logic/OR",
  "logic/NOT",
  "macros/exists",
  "macros/all",
  "macros/exists_one",
  "macros/map",
  "macros/filter",
  "macros/nested",
  "string/size",
  "string/starts_with",
  "string/ends_with",
  "string/matches",
  "string/concatenation",
  "string/contains",
];

function suite(path: string): SerializedIncrementalTestSuite {
  let node: SerializedIncrementalTestSuite | undefined = tests;
  for (const part of path.split("/")) node = node?.suites?.find((s) => s.name === part);
  if (node === undefined) throw new Error(`no suite ${path}`);
  return node;
}

type ProtoValue = Record<string, unknown>;

/** A conformance `Value` (protobuf JSON) as @bufbuild/cel returns it: int → bigint, uint → CelUint. */
function expected(v: ProtoValue): unknown {
  if ("int64Value" in v) return BigInt(v.int64Value as string);
  if ("uint64Value" in v) return celUint(BigInt(v.uint64Value as string));
  if ("doubleValue" in v) return typeof v.doubleValue === "string" ? Number(v.doubleValue) : v.doubleValue;
  if ("stringValue" in v) return v.stringValue;
  if ("boolValue" in v) return v.boolValue;
  if ("nullValue" in v) return null;
  // Bytes compare as their octets (plain() turns a Uint8Array into an array too).
  if ("bytesValue" in v) return [...Buffer.from(v.bytesValue as string, "base64")];
  if ("listValue" in v) return ((v.listValue as { values?: ProtoValue[] }).values ?? []).map(expected);
  if ("mapValue" in v) {
    const entries = (v.mapValue as { entries?: { key: ProtoValue; value: ProtoValue }[] }).entries ?? [];
    return new Map(entries.map((e) => [expected(e.key), expected(e.value)]));
  }
  return { unsupported: Object.keys(v) };
}

/** The result in comparable form: CEL lists and maps become arrays and Maps. */
function plain(v: unknown): unknown {
  if (typeof v !== "object" || v === null) return v;
  const o = v as { [Symbol.iterator]?: unknown; entries?: unknown; get?: unknown; size?: unknown };
  if (typeof o.get === "function" && typeof o.entries === "function" && typeof o.size === "number") {
    return new Map(
      [...(o.entries as () => Iterable<[unknown, unknown]>)()].map(([k, x]) => [plain(k), plain(x)]),
    );
  }
  if (typeof o[Symbol.iterator] === "function") return [...(v as Iterable<unknown>)].map(plain);
  return v;
}

/**
 * Whether our type is cel-go's or a less specific one: we type `[]` as list(dyn) where cel-go infers an
 * element type parameter, so `[] + [1]` is list(dyn) here and list(int) there. Never more specific.
 */
function generalizes(ours: string, theirs: string): boolean {
  if (ours === theirs || ours === "dyn") return true;
  const parts = (t: string) => t.split(/([(), ]+)/).filter((x) => x !== "");
  const a = parts(ours);
  const b = parts(theirs);
  // Token-wise, where a "dyn" of ours may stand for any one type of theirs (a word or a parenthesised group).
  let j = 0;
  for (let i = 0; i < a.length; i++, j++) {
    if (a[i] === b[j]) continue;
    if (a[i] !== "dyn") return false;
    if (b[j + 1] === "(") {
      let depth = 0;
      for (j++; j < b.length; j++) {
        if (b[j]?.includes("(")) depth++;
        if (b[j]?.includes(")") && --depth === 0) break;
      }
    }
  }
  return j === b.length;
}

interface Tally {
  stricter: number;
  ran: number;
  rejected: string[];
  wrongType: string[];
  acceptedCheckError: string[];
}

function runSuite(path: string): Tally {
  const tally: Tally = { stricter: 0, ran: 0, rejected: [], wrongType: [], acceptedCheckError: [] };
  for (const t of suite(path).tests ?? []) {
    const o = t.original as SerializedIncrementalTest["original"] & Record<string, unknown>;
    if (o.typeEnv !== undefined || o.bindings !== undefined || o.container !== undefined || o.disableMacros)
      continue;
    const r = checkAndRun(o.expr);
    const name = `${path}/${o.name}: ${o.expr}`;
    if ("rejected" in r) {
      // Stricter than cel-go is allowed only where the call could never succeed: an expression whose
      // evaluation is an error anyway, or a protobuf message (a policy's variables have none).
      const fails = o.evalError !== undefined || /message construction/.test(r.rejected);
      if (t.error === undefined && !fails) tally.rejected.push(`${name} (${r.rejected})`);
      if (t.error === undefined) tally.stricter++;
      continue;
    }
    if (t.error !== undefined && o.disableCheck !== true)
      tally.acceptedCheckError.push(`${name} (${t.error})`);
    if (t.type !== undefined && !generalizes(r.type, t.type))
      tally.wrongType.push(`${name}: ${r.type} vs ${t.type}`);
    tally.ran++;
    if (o.evalError !== undefined) {
      expect(isCelError(r.value), name).toBe(true);
    } else if (o.value !== undefined) {
      expect(isCelError(r.value) ? `error: ${(r.value as Error).message}` : plain(r.value), name).toEqual(
        expected(o.value as ProtoValue),
      );
    }
  }
  return tally;
}

describe("cel-spec conformance, the policy subset, through our checker and @bufbuild/cel", () => {
  const totals: Tally = { stricter: 0, ran: 0, rejected: [], wrongType: [], acceptedCheckError: [] };
  for (const path of SUBSET) {
    it(path, () => {
      const t = runSuite(path);
      totals.ran += t.ran;
      totals.stricter += t.stricter;
      totals.rejected.push(...t.rejected);
      totals.wrongType.push(...t.wrongType);
      totals.acceptedCheckError.push(...t.acceptedCheckError);
    });
  }
  it("our checker agrees with cel-go's: no type it contradicts, nothing it accepts that cel-go refuses", () => {
    expect(totals.wrongType).toEqual([]);
    expect(totals.acceptedCheckError).toEqual([]);
    expect(totals.rejected).toEqual([]);
    // The subset is run, not skipped: hundreds of expressions evaluated, a handful refused at load.
    expect(totals.ran).toBeGreaterThan(600);
    expect(totals.stricter).toBeLessThan(10);
  });
});
