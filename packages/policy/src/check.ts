// A static type checker and cost estimator over @bufbuild/cel's parsed syntax tree, for the part of CEL a
// policy condition uses. It evaluates nothing (evaluation is @bufbuild/cel's `plan`); it refuses at load.
import type {
  Expr,
  Expr_Call,
  Expr_Comprehension,
  Expr_CreateStruct,
} from "@bufbuild/cel-spec/cel/expr/syntax_pb.js";
import { type CelT, CheckFailure, isDyn, isNumeric, join, typeName } from "./cel-types.js";
import { callType } from "./check-calls.js";
import { MAX_EXPRESSION_DEPTH, MAX_ITERATION } from "./limits.js";

export { type CelT, CheckFailure, typeName };

export interface CheckResult {
  readonly type: CelT;
  /** Estimated worst-case cost: a comprehension over a literal runs its length, any other MAX_ITERATION times. */
  readonly cost: number;
  /** Whether a comprehension ranges over something not a literal (its rules need the input size check). */
  readonly iterates: boolean;
  /** Every `matches` pattern (all literals). */
  readonly patterns: readonly string[];
}

type Typed = { readonly t: CelT; readonly c: number };

/** One walk over one expression: the comprehension scopes it is inside, and whether it iterates over input. */
class Walker {
  iterates = false;
  /** The regular expressions `matches` is called with, for compiling once at load. */
  readonly patterns: string[] = [];
  private readonly scopes: Map<string, CelT>[] = [];

  constructor(private readonly variables: ReadonlyMap<string, CelT>) {}

  private lookup(name: string): CelT | undefined {
    for (let i = this.scopes.length - 1; i >= 0; i--) {
      const t = this.scopes[i]?.get(name);
      if (t !== undefined) return t;
    }
    return this.variables.get(name);
  }

  visit(e: Expr, depth: number): Typed {
    if (depth > MAX_EXPRESSION_DEPTH) {
      throw new CheckFailure(`expression nests deeper than ${MAX_EXPRESSION_DEPTH}`, e.id, "depth");
    }
    const kind = e.exprKind;
    switch (kind.case) {
      case "constExpr":
        return { t: constantType(kind.value.constantKind.case, e.id), c: 1 };
      case "identExpr": {
        const t = this.lookup(kind.value.name);
        if (t === undefined) throw new CheckFailure(`undeclared reference to '${kind.value.name}'`, e.id);
        return { t, c: 1 };
      }
      case "selectExpr": {
        const operand = kind.value.operand;
        if (operand === undefined) throw new CheckFailure("select without operand", e.id);
        const o = this.visit(operand, depth + 1);
        const t = selectType(o.t, kind.value.field, e.id);
        return { t: kind.value.testOnly ? "bool" : t, c: o.c + 1 };
      }
      case "callExpr":
        return this.call(kind.value, e.id, depth);
      case "listExpr": {
        const elems = kind.value.elements.map((x) => this.visit(x, depth + 1));
        const elem = elems.length === 0 ? "dyn" : elems.map((x) => x.t).reduce(join);
        return { t: { list: elem }, c: 1 + elems.reduce((s, x) => s + x.c, 0) };
      }
      case "structExpr":
        return this.mapLiteral(kind.value, e.id, depth);
      case "comprehensionExpr":
        return this.comprehension(kind.value, e.id, depth);
      default:
        throw new CheckFailure("unsupported expression", e.id);
    }
  }

  private call(call: Expr_Call, id: bigint, depth: number): Typed {
    if (call.function === "matches") this.patterns.push(literalPattern(call, id));
    const target = call.target === undefined ? undefined : this.visit(call.target, depth + 1);
    const args = call.args.map((a) => this.visit(a, depth + 1));
    const c = (target?.c ?? 0) + args.reduce((s, a) => s + a.c, 0);
    const r = callType(
      call.function,
      target?.t,
      args.map((a) => a.t),
      id,
    );
    return { t: r.t, c: c + r.c + concatenationCost(call.function, call.args, r.t) };
  }

  private mapLiteral(struct: Expr_CreateStruct, id: bigint, depth: number): Typed {
    if (struct.messageName !== "") {
      throw new CheckFailure(`message construction (${struct.messageName}) is not available`, id);
    }
    let key: CelT | undefined;
    let value: CelT | undefined;
    let c = 1;
    for (const entry of struct.entries) {
      if (entry.keyKind.case !== "mapKey" || entry.value === undefined) {
        throw new CheckFailure("a map literal needs key: value entries", id);
      }
      const k = this.visit(entry.keyKind.value, depth + 1);
      const v = this.visit(entry.value, depth + 1);
      key = key === undefined ? k.t : join(key, k.t);
      value = value === undefined ? v.t : join(value, v.t);
      c += k.c + v.c;
    }
    return { t: { map: [key ?? "dyn", value ?? "dyn"] }, c };
  }

  private comprehension(comp: Expr_Comprehension, id: bigint, depth: number): Typed {
    if (comp.iterRange === undefined || comp.accuInit === undefined || comp.result === undefined) {
      throw new CheckFailure("incomplete comprehension", id);
    }
    const bound = iterationBound(comp.iterRange);
    if (bound === MAX_ITERATION) this.iterates = true;
    const range = this.visit(comp.iterRange, depth + 1);
    const [first, second] = iterationTypes(range.t, comp.iterVar2 !== "", id);
    const init = this.visit(comp.accuInit, depth + 1);
    this.scopes.push(new Map([[comp.accuVar, init.t]]));
    const loop = new Map([[comp.iterVar, first]]);
    if (comp.iterVar2 !== "") loop.set(comp.iterVar2, second);
    this.scopes.push(loop);
    const cond = comp.loopCondition === undefined ? { c: 0 } : this.visit(comp.loopCondition, depth + 1);
    const step = comp.loopStep === undefined ? { c: 0 } : this.visit(comp.loopStep, depth + 1);
    this.scopes.pop();
    const result = this.visit(comp.result, depth + 1);
    this.scopes.pop();
    return { t: result.t, c: range.c + init.c + bound * (cond.c + step.c + 1) + result.c };
  }
}

/** Type-checks `expr` against the declared variables; throws CheckFailure naming the node. */
export function checkExpression(expr: Expr, variables: ReadonlyMap<string, CelT>): CheckResult {
  const walker = new Walker(variables);
  const { t, c } = walker.visit(expr, 0);
  return { type: t, cost: c, iterates: walker.iterates, patterns: walker.patterns };
}

/**
 * A `+` that builds a string, bytes or a list allocates in proportion to its operands, so it costs
 * CONCATENATION_COST: inside a comprehension over args that is enough to refuse `args.l.map(x, s + s)`.
 * The accumulator step a `map` / `filter` macro expands to (`@result + [x]`) costs what any node does.
 */
const CONCATENATION_COST = 100;
function concatenationCost(fn: string, args: readonly Expr[], result: CelT): number {
  if (fn !== "_+_" || isNumeric(result) || result === "timestamp" || result === "duration") return 0;
  const left = args[0]?.exprKind;
  return left?.case === "identExpr" && left.value.name.startsWith("@") ? 0 : CONCATENATION_COST;
}

/**
 * A `matches` pattern must be a string literal: a pattern taken from the call would let the caller
 * choose what is compiled and how long matching takes, and a literal can be compiled (checked) at load.
 */
function literalPattern(call: Expr_Call, id: bigint): string {
  const pattern = call.target === undefined ? call.args[1] : call.args[0];
  const k = pattern?.exprKind;
  if (k?.case === "constExpr" && k.value.constantKind.case === "stringValue")
    return k.value.constantKind.value;
  throw new CheckFailure("matches needs a literal pattern (a quoted string)", pattern?.id ?? id);
}

/** How many times a comprehension may run: a literal's own length, else MAX_ITERATION (the input bound). */
function iterationBound(range: Expr): number {
  const k = range.exprKind;
  if (k.case === "listExpr") return k.value.elements.length;
  if (k.case === "structExpr") return k.value.entries.length;
  return MAX_ITERATION;
}

function constantType(kind: string | undefined, id: bigint): CelT {
  switch (kind) {
    case "boolValue":
      return "bool";
    case "int64Value":
      return "int";
    case "uint64Value":
      return "uint";
    case "doubleValue":
      return "double";
    case "stringValue":
      return "string";
    case "bytesValue":
      return "bytes";
    case "nullValue":
      return "null_type";
    default:
      throw new CheckFailure(`unsupported constant ${kind}`, id);
  }
}

function selectType(operand: CelT, field: string, id: bigint): CelT {
  if (isDyn(operand)) return "dyn";
  if (typeof operand !== "string") {
    if ("record" in operand) {
      const t = operand.fields[field];
      if (t === undefined) {
        const known = Object.keys(operand.fields).join(", ");
        throw new CheckFailure(`'${operand.record}' has no field '${field}' (it has ${known})`, id);
      }
      return t;
    }
    if ("map" in operand && (operand.map[0] === "string" || isDyn(operand.map[0]))) return operand.map[1];
  }
  throw new CheckFailure(`type '${typeName(operand)}' has no field '${field}'`, id);
}

function iterationTypes(range: CelT, two: boolean, id: bigint): [CelT, CelT] {
  if (isDyn(range)) return ["dyn", "dyn"];
  if (typeof range !== "string") {
    if ("list" in range) return two ? ["int", range.list] : [range.list, "dyn"];
    if ("map" in range) return [range.map[0], range.map[1]];
    if ("record" in range) return ["string", "dyn"];
  }
  throw new CheckFailure(`cannot iterate over '${typeName(range)}'`, id);
}
