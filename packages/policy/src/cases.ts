// `leash policy test`: cases (a call, or a sequence of calls sharing limit counters, with the expected
// outcome) run through evaluatePolicy, each mismatch reported field by field. Pure: text in, report out.
import { parse as parseYaml } from "yaml";
import type { CompiledPolicy } from "./compile.js";
import { PolicyError } from "./errors.js";
import { evaluatePolicy, type PolicyInput, type PolicyOutcome } from "./evaluate.js";
import { MAX_POLICY_BYTES, MAX_YAML_ALIASES } from "./limits.js";
import { applyCounterUpdates, EMPTY_STATE, type PolicyState } from "./state.js";

/** What a case expects; only the fields given are compared. */
export interface CaseExpectation {
  readonly verdict?: string;
  readonly reason?: string;
  readonly rule?: string | null;
  readonly message?: string;
  readonly monitor?: readonly string[];
  readonly estimate_usd?: number | null;
}

export interface CaseStep {
  readonly call: Omit<PolicyInput, "time"> & { readonly time?: { readonly unix_s: number } };
  readonly expect: CaseExpectation;
}

export interface PolicyCase {
  readonly name: string;
  readonly steps: readonly CaseStep[];
}

export interface CaseDiff {
  readonly field: string;
  readonly expected: unknown;
  readonly actual: unknown;
}

export interface CaseFailure {
  readonly name: string;
  /** 0-based step of a sequence (0 for a single call). */
  readonly step: number;
  readonly diffs: readonly CaseDiff[];
}

export interface CaseReport {
  readonly total: number;
  readonly passed: number;
  readonly failures: readonly CaseFailure[];
}

function invalid(path: string, detail: string): PolicyError {
  return new PolicyError("policy_invalid", path, detail);
}

function asStep(raw: unknown, path: string): CaseStep {
  if (typeof raw !== "object" || raw === null) throw invalid(path, "must be an object with call and expect");
  const { call, expect } = raw as { call?: unknown; expect?: unknown };
  if (typeof call !== "object" || call === null) throw invalid(`${path}.call`, "is required (an object)");
  const c = call as { tool?: unknown; agent?: unknown };
  if (typeof c.tool !== "string") throw invalid(`${path}.call.tool`, "is required (a string)");
  if (c.agent !== undefined && typeof c.agent !== "string")
    throw invalid(`${path}.call.agent`, "must be a string");
  const time = (call as { time?: { unix_s?: unknown } }).time;
  if (time !== undefined && !Number.isFinite(time?.unix_s)) {
    throw invalid(`${path}.call.time.unix_s`, "must be a number (unix seconds)");
  }
  if (typeof expect !== "object" || expect === null)
    throw invalid(`${path}.expect`, "is required (an object)");
  const agent = typeof c.agent === "string" ? c.agent : "agent";
  return { call: { ...(call as CaseStep["call"]), agent }, expect: expect as CaseExpectation };
}

/** Reads a cases file (YAML or JSON): `cases: [{name, call, expect} | {name, sequence: [{call, expect}]}]`. */
export function parseCases(text: string): PolicyCase[] {
  if (text.length > MAX_POLICY_BYTES * 4)
    throw new PolicyError("policy_too_large", "", "the cases file is too large");
  let doc: unknown;
  try {
    doc = text.trimStart().startsWith("{")
      ? JSON.parse(text)
      : parseYaml(text, { maxAliasCount: MAX_YAML_ALIASES });
  } catch (cause) {
    throw new PolicyError(
      "policy_unparsable",
      "",
      `cases are not valid YAML or JSON: ${(cause as Error).message}`,
    );
  }
  const list = (doc as { cases?: unknown } | null)?.cases;
  if (!Array.isArray(list)) throw invalid("cases", "is required (a list)");
  return list.map((raw, i) => {
    const path = `cases[${i}]`;
    const item = raw as { name?: unknown; sequence?: unknown };
    if (typeof item?.name !== "string") throw invalid(`${path}.name`, "is required (a string)");
    if (item.sequence !== undefined) {
      if (!Array.isArray(item.sequence) || item.sequence.length === 0) {
        throw invalid(`${path}.sequence`, "must be a non-empty list of {call, expect}");
      }
      return { name: item.name, steps: item.sequence.map((s, j) => asStep(s, `${path}.sequence[${j}]`)) };
    }
    return { name: item.name, steps: [asStep(raw, path)] };
  });
}

function compare(expect: CaseExpectation, got: PolicyOutcome): CaseDiff[] {
  const diffs: CaseDiff[] = [];
  const check = (field: string, expected: unknown, actual: unknown) => {
    if (expected !== undefined && JSON.stringify(expected) !== JSON.stringify(actual)) {
      diffs.push({ field, expected, actual });
    }
  };
  check("verdict", expect.verdict?.toUpperCase(), got.verdict);
  check("reason", expect.reason, got.reason);
  check("rule", expect.rule, got.rule ?? null);
  check("message", expect.message, got.message ?? null);
  check(
    "monitor",
    expect.monitor,
    got.monitor.map((m) => m.would),
  );
  check("estimate_usd", expect.estimate_usd, got.estimate_usd ?? null);
  return diffs;
}

/** Runs every case; a sequence threads the limit counters from one call to the next. */
export function runCases(policy: CompiledPolicy, cases: readonly PolicyCase[]): CaseReport {
  const failures: CaseFailure[] = [];
  for (const c of cases) {
    let state: PolicyState = EMPTY_STATE;
    c.steps.forEach((step, i) => {
      const input: PolicyInput = { ...step.call, time: step.call.time ?? { unix_s: 0 } };
      const got = evaluatePolicy(policy, input, state);
      // A case's HITL is not approved: only an ALLOWed call goes ahead and counts.
      if (got.verdict === "ALLOW") state = applyCounterUpdates(state, got.counterUpdates, input.time.unix_s);
      const diffs = compare(step.expect, got);
      if (diffs.length > 0) failures.push({ name: c.name, step: i, diffs });
    });
  }
  const failed = new Set(failures.map((f) => f.name)).size;
  return { total: cases.length, passed: cases.length - failed, failures };
}

/** A failing case as people read it: the case, then `field: expected … got …` per line. */
export function formatFailure(f: CaseFailure, steps: number): string {
  const head = steps > 1 ? `✗ ${f.name} (call ${f.step + 1} of ${steps})` : `✗ ${f.name}`;
  const lines = f.diffs.map(
    (d) =>
      `    ${d.field}:\n      - expected ${JSON.stringify(d.expected)}\n      + actual   ${JSON.stringify(d.actual)}`,
  );
  return [head, ...lines].join("\n");
}
