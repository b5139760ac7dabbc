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
  /** true / false, or the error's message. */
  run(bindings: ConditionBindings): boolean | { readonly error: string };
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

/**
 * Parses, checks and plans `text` with `variables` (the policy's by default).
 * @throws PolicyError expression_syntax / expression_type / expression_too_complex at `path`.
 */
export function compileCondition(
  text: string,
  path: string,
  variables: ReadonlyMap<string, CelT> = CONDITION_VARIABLES,
): CelCondition {
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
  if (result.type !== "bool" && result.type !== "dyn") {
    throw new PolicyError("expression_type", path, `must be a bool condition, not ${typeName(result.type)}`);
  }
  if (result.cost > MAX_EXPRESSION_COST) {
    throw new PolicyError(
      "expression_too_complex",
      path,
      `estimated cost ${result.cost} is over the limit of ${MAX_EXPRESSION_COST} (nested comprehensions?)`,
    );
  }
  const program = plan(ENV, parsed);
  return {
    text,
    cost: result.cost,
    iterates: result.iterates,
    run(bindings) {
      // biome-ignore lint/suspicious/noExplicitAny: the bindings match ENV's declarations by construction.
      const value = program(bindings as any);
      if (isCelError(value)) return { error: value.message };
      if (typeof value !== "boolean") return { error: `the condition gave ${typeof value}, not a bool` };
      return value;
    },
  };
}

/**
 * Parses, checks and runs one expression with no variables: the path the conformance tests take
 * (the same parse, checker and plan a rule's condition goes through, without the bool requirement).
 */
export function checkAndRun(text: string): { type: string; value: unknown } | { rejected: string } {
  let parsed: ParsedExpr;
  try {
    parsed = parse(text);
  } catch (e) {
    return { rejected: `syntax: ${(e as Error).message}` };
  }
  if (parsed.expr === undefined) return { rejected: "empty" };
  let type: CelT;
  try {
    const r = checkExpression(parsed.expr, new Map());
    if (r.cost > MAX_EXPRESSION_COST) return { rejected: "cost" };
    type = r.type;
  } catch (e) {
    return { rejected: (e as Error).message };
  }
  return { type: typeName(type), value: plan(celEnv(), parsed)() };
}
