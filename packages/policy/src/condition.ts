// One rule's `when`: parsed by @bufbuild/cel, type-checked and cost-estimated by check.ts, planned once;
// run with the call's bindings. Errors name the column. The variables a condition sees are declared here.
import { CelScalar, celEnv, isCelError, listType, mapType, parse, plan } from "@bufbuild/cel";
import type { ParsedExpr } from "@bufbuild/cel-spec/cel/expr/syntax_pb.js";
import { type CelT, CheckFailure, checkExpression, typeName } from "./check.js";
import { PolicyError } from "./errors.js";
import { MAX_BRACKET_DEPTH, MAX_EXPRESSION_COST, MAX_EXPRESSION_LENGTH } from "./limits.js";

const record = (name: string, fields: Record<string, CelT>): CelT => ({ record: name, fields });

/** What a condition may name, with its type; the README's "Variables" table is this. */
export const CONDITION_VARIABLES: ReadonlyMap<string, CelT> = new Map<string, CelT>([
  ["tool", "string"],
  ["agent", "string"],
  ["org", "string"],
  ["tags", { list: "string" }],
  ["args", "dyn"],
  ["estimate_usd", "double"],
  ["has_estimate", "bool"],
  [
    "session",
    record("session", { id: "string", calls: "int", repeat: "int", denied: "int", spent_usd: "double" }),
  ],
  ["budget", record("budget", { limit_usd: "double", spent_usd: "double", remaining_usd: "double" })],
  ["time", record("time", { unix_s: "int", hour_utc: "int", minute_utc: "int", weekday_utc: "int" })],
]);

const RECORD = mapType(CelScalar.STRING, CelScalar.DYN);
const ENV = celEnv({
  variables: {
    tool: CelScalar.STRING,
    agent: CelScalar.STRING,
    org: CelScalar.STRING,
    tags: listType(CelScalar.STRING),
    args: CelScalar.DYN,
    estimate_usd: CelScalar.DOUBLE,
    has_estimate: CelScalar.BOOL,
    session: RECORD,
    budget: RECORD,
    time: RECORD,
  },
});

/** `matches` on an empty string: compiles a pattern with the same RE2 a condition uses, to refuse a bad one at load. */
const MATCHES = plan(celEnv({ variables: { p: CelScalar.STRING } }), parse("''.matches(p)"));

/** The values a condition runs with: CEL ints are bigints, doubles numbers; `args` is the call's JSON. */
export interface ConditionBindings {
  readonly tool: string;
  readonly agent: string;
  readonly org: string;
  readonly tags: readonly string[];
  readonly args: unknown;
  readonly estimate_usd: number;
  readonly has_estimate: boolean;
  readonly session: Readonly<Record<string, string | bigint | number>>;
  readonly budget: Readonly<Record<string, number>>;
  readonly time: Readonly<Record<string, bigint>>;
}

export interface CelCondition {
  readonly text: string;
  readonly cost: number;
  /** Whether it has a comprehension (`exists`, `all`, …): such a rule is run only on bounded args. */
  readonly iterates: boolean;
  /** true / false, or the error's message; `bindings` as ConditionBindings, or a CallBindings (bindings.ts). */
  run(bindings: object): boolean | { readonly error: string };
}

function bracketDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let quote: string | undefined;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (quote !== undefined) {
      if (ch === "\\") i++;
      else if (ch === quote) quote = undefined;
      continue;
    }
    if (ch === '"' || ch === "'") quote = ch;
    else if (ch === "(" || ch === "[" || ch === "{") max = Math.max(max, ++depth);
    else if (ch === ")" || ch === "]" || ch === "}") depth--;
  }
  return max;
}

function column(parsed: ParsedExpr, id: bigint): number | undefined {
  const offset = parsed.sourceInfo?.positions[id.toString()];
  return offset === undefined ? undefined : offset + 1;
}

interface CompiledExpression {
  readonly type: CelT;
  readonly cost: number;
  readonly iterates: boolean;
  // biome-ignore lint/suspicious/noExplicitAny: the bindings match ENV's declarations by construction.
  readonly program: (bindings: any) => unknown;
}

/**
 * Bounds, parse, type check, cost, plan: every expression a policy holds goes through here.
 * @throws PolicyError expression_syntax / expression_type / expression_too_complex at `path`.
 */
function compileExpression(
  text: string,
  path: string,
  variables: ReadonlyMap<string, CelT>,
): CompiledExpression {
  if (text.length > MAX_EXPRESSION_LENGTH) {
    throw new PolicyError("expression_too_complex", path, `longer than ${MAX_EXPRESSION_LENGTH} characters`);
  }
  if (bracketDepth(text) > MAX_BRACKET_DEPTH) {
    throw new PolicyError(
      "expression_too_complex",
      path,
      `more than ${MAX_BRACKET_DEPTH} brackets open at once`,
    );
  }
  let parsed: ParsedExpr;
  try {
    parsed = parse(text);
  } catch (cause) {
    const location = (cause as { location?: { start?: { column?: number } } }).location;
    const detail = String((cause as { rawMessage?: string }).rawMessage ?? (cause as Error).message);
    const col = location?.start?.column;
    throw new PolicyError("expression_syntax", path, detail, {
      ...(col === undefined ? {} : { column: col }),
      cause,
    });
  }
  if (parsed.expr === undefined) throw new PolicyError("expression_syntax", path, "empty expression");
  let result: ReturnType<typeof checkExpression>;
  try {
    result = checkExpression(parsed.expr, variables);
  } catch (cause) {
    if (!(cause instanceof CheckFailure)) throw cause;
    const col = column(parsed, cause.exprId);
    const code = cause.kind === "depth" ? "expression_too_complex" : "expression_type";
    throw new PolicyError(code, path, cause.message, {
      ...(col === undefined ? {} : { column: col }),
      cause,
    });
  }
  if (result.cost > MAX_EXPRESSION_COST) {
    throw new PolicyError(
      "expression_too_complex",
      path,
      `estimated cost ${result.cost} is over the limit of ${MAX_EXPRESSION_COST} (nested comprehensions?)`,
    );
  }
  for (const pattern of result.patterns) {
    const compiled = MATCHES({ p: pattern });
    if (isCelError(compiled)) {
      throw new PolicyError(
        "expression_syntax",
        path,
        `invalid regular expression ${JSON.stringify(pattern)}: ${compiled.message}`,
      );
    }
  }
  return { ...result, program: plan(ENV, parsed) };
}

/**
 * A rule's condition: compiled as above, and its type must be bool (or dyn, checked when it runs).
 * @throws PolicyError at `path`.
 */
export function compileCondition(
  text: string,
  path: string,
  variables: ReadonlyMap<string, CelT> = CONDITION_VARIABLES,
): CelCondition {
  const compiled = compileExpression(text, path, variables);
  if (compiled.type !== "bool" && compiled.type !== "dyn") {
    throw new PolicyError(
      "expression_type",
      path,
      `must be a bool condition, not ${typeName(compiled.type)}`,
    );
  }
  const { program } = compiled;
  return {
    text,
    cost: compiled.cost,
    iterates: compiled.iterates,
    run(bindings) {
      let value: unknown;
      try {
        value = program(bindings);
      } catch (error) {
        // @bufbuild/cel reports errors as values; anything thrown still fails the rule closed.
        return { error: error instanceof Error ? error.message : String(error) };
      }
      if (isCelError(value)) return { error: value.message };
      if (typeof value !== "boolean") return { error: `the condition gave ${typeof value}, not a bool` };
      return value;
    },
  };
}

/** Bindings of a call with nothing in it, for running an expression that names no variable. */
const EMPTY_BINDINGS: ConditionBindings = {
  tool: "",
  agent: "",
  org: "",
  tags: [],
  args: {},
  estimate_usd: 0,
  has_estimate: false,
  session: { id: "", calls: 0n, repeat: 0n, denied: 0n, spent_usd: 0 },
  budget: { limit_usd: 0, spent_usd: 0, remaining_usd: 0 },
  time: { unix_s: 0n, hour_utc: 0n, minute_utc: 0n, weekday_utc: 0n },
};

/**
 * Compiles one expression exactly as a rule's `when` is compiled (same bounds, checker, environment and
 * planner), without the bool requirement, and runs it with `bindings`: the path the conformance and
 * checker-soundness tests take.
 */
export function checkAndRun(
  text: string,
  bindings: ConditionBindings = EMPTY_BINDINGS,
): { type: string; value: unknown } | { rejected: string } {
  let compiled: CompiledExpression;
  try {
    compiled = compileExpression(text, "expr", CONDITION_VARIABLES);
  } catch (e) {
    if (!PolicyError.isInstance(e)) throw e;
    return { rejected: (e as PolicyError).detail };
  }
  return { type: typeName(compiled.type), value: compiled.program(bindings) };
}
