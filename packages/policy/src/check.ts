// A static type checker and cost estimator over @bufbuild/cel's parsed syntax tree, for the part of CEL a
// policy condition uses. It evaluates nothing (evaluation is @bufbuild/cel's `plan`); it refuses at load.
import type { Expr } from "@bufbuild/cel-spec/cel/expr/syntax_pb.js";
import { MAX_EXPRESSION_DEPTH, MAX_ITERATION } from "./limits.js";

/** A CEL type as the checker sees it; records are objects with known fields (a misspelt field is an error). */
export type CelT =
  | "bool"
  | "int"
  | "uint"
  | "double"
  | "string"
  | "bytes"
  | "null_type"
  | "dyn"
  | "timestamp"
  | "duration"
  | "type"
  | { readonly list: CelT }
  | { readonly map: readonly [CelT, CelT] }
  | { readonly record: string; readonly fields: Readonly<Record<string, CelT>> };

export class CheckFailure extends Error {
  constructor(
    message: string,
    readonly exprId: bigint,
    readonly kind: "type" | "depth" = "type",
  ) {
    super(message);
  }
}

export function typeName(t: CelT): string {
  if (t === "null_type") return "null";
  if (typeof t === "string") return t;
  if ("list" in t) return `list(${typeName(t.list)})`;
  if ("map" in t) return `map(${typeName(t.map[0])}, ${typeName(t.map[1])})`;
  return t.record;
}

const NUMERIC = new Set<CelT>(["int", "uint", "double"]);
const isNumeric = (t: CelT) => typeof t === "string" && NUMERIC.has(t);
const isDyn = (t: CelT) => t === "dyn";

function sameType(a: CelT, b: CelT): boolean {
  if (typeof a === "string" || typeof b === "string") return a === b;
  if ("list" in a) return "list" in b && sameType(a.list, b.list);
  if ("map" in a) return "map" in b && sameType(a.map[0], b.map[0]) && sameType(a.map[1], b.map[1]);
  return "record" in b && a.record === b.record;
}

/** The common type of two branches or elements: the type itself when equal, else dyn. */
function join(a: CelT, b: CelT): CelT {
  return sameType(a, b) ? a : "dyn";
}

/** Whether values of these types may be compared with == (CEL's heterogeneous numeric equality included). */
function comparableForEquality(a: CelT, b: CelT): boolean {
  if (isDyn(a) || isDyn(b) || a === "null_type" || b === "null_type") return true;
  if (isNumeric(a) && isNumeric(b)) return true;
  if (typeof a !== "string" && typeof b !== "string") {
    if ("list" in a && "list" in b) return comparableForEquality(a.list, b.list);
    if ("map" in a && "map" in b)
      return comparableForEquality(a.map[0], b.map[0]) && comparableForEquality(a.map[1], b.map[1]);
    if ("record" in a && "record" in b) return a.record === b.record;
    // A record is passed to CEL as a map with string keys.
    if ("record" in a && "map" in b) return true;
    if ("map" in a && "record" in b) return true;
  }
  return sameType(a, b);
}

function orderable(a: CelT, b: CelT): boolean {
  if (isDyn(a) || isDyn(b)) return isDyn(a) ? orderableAlone(b) : orderableAlone(a);
  if (isNumeric(a) && isNumeric(b)) return true;
  return typeof a === "string" && a === b && ["string", "bytes", "bool", "timestamp", "duration"].includes(a);
}
const orderableAlone = (t: CelT) =>
  isDyn(t) || isNumeric(t) || ["string", "bytes", "bool", "timestamp", "duration"].includes(t as string);

type Fixed = { readonly recv?: CelT; readonly args: readonly CelT[]; readonly out: CelT };

/** Functions with fixed signatures: receiver-style (`recv`) or global. Cost is per call. */
const FIXED: Readonly<Record<string, { readonly overloads: readonly Fixed[]; readonly cost: number }>> = {
  contains: { overloads: [{ recv: "string", args: ["string"], out: "bool" }], cost: 10 },
  startsWith: { overloads: [{ recv: "string", args: ["string"], out: "bool" }], cost: 10 },
  endsWith: { overloads: [{ recv: "string", args: ["string"], out: "bool" }], cost: 10 },
  matches: {
    overloads: [
      { recv: "string", args: ["string"], out: "bool" },
      { args: ["string", "string"], out: "bool" },
    ],
    cost: 100,
  },
  getFullYear: timestampGetter(),
  getMonth: timestampGetter(),
  getDayOfYear: timestampGetter(),
  getDayOfMonth: timestampGetter(),
  getDate: timestampGetter(),
  getDayOfWeek: timestampGetter(),
  getHours: {
    overloads: [...timestampGetter().overloads, { recv: "duration", args: [], out: "int" }],
    cost: 2,
  },
  getMinutes: {
    overloads: [...timestampGetter().overloads, { recv: "duration", args: [], out: "int" }],
    cost: 2,
  },
  getSeconds: {
    overloads: [...timestampGetter().overloads, { recv: "duration", args: [], out: "int" }],
    cost: 2,
  },
  getMilliseconds: {
    overloads: [...timestampGetter().overloads, { recv: "duration", args: [], out: "int" }],
    cost: 2,
  },
};

function timestampGetter(): { overloads: Fixed[]; cost: number } {
  return {
    overloads: [
      { recv: "timestamp", args: [], out: "int" },
      { recv: "timestamp", args: ["string"], out: "int" },
    ],
    cost: 2,
  };
}

/** Conversions: what each accepts. `dyn` is accepted everywhere (checked when the call runs). */
const CONVERSIONS: Readonly<Record<string, { readonly from: readonly CelT[]; readonly out: CelT }>> = {
  int: { from: ["int", "uint", "double", "string", "timestamp"], out: "int" },
  uint: { from: ["int", "uint", "double", "string"], out: "uint" },
  double: { from: ["int", "uint", "double", "string"], out: "double" },
  string: {
    from: ["int", "uint", "double", "string", "bytes", "bool", "timestamp", "duration"],
    out: "string",
  },
  bool: { from: ["bool", "string"], out: "bool" },
  bytes: { from: ["bytes", "string"], out: "bytes" },
  timestamp: { from: ["string", "int", "timestamp"], out: "timestamp" },
  duration: { from: ["string", "duration"], out: "duration" },
};

const assignable = (actual: CelT, param: CelT) => isDyn(actual) || isDyn(param) || sameType(actual, param);

export interface CheckResult {
  readonly type: CelT;
  /** Estimated worst-case cost: a comprehension over a literal runs its length, any other MAX_ITERATION times. */
  readonly cost: number;
  /** Whether a comprehension ranges over something not a literal (its rules need the input size check). */
  readonly iterates: boolean;
}

/** Type-checks `expr` against the declared variables; throws CheckFailure naming the node. */
export function checkExpression(expr: Expr, variables: ReadonlyMap<string, CelT>): CheckResult {
  let iterates = false;
  const scopes: Map<string, CelT>[] = [];

  const lookup = (name: string): CelT | undefined => {
    for (let i = scopes.length - 1; i >= 0; i--) {
      const t = scopes[i]?.get(name);
      if (t !== undefined) return t;
    }
    return variables.get(name);
  };

  const visit = (e: Expr, depth: number): { t: CelT; c: number } => {
    if (depth > MAX_EXPRESSION_DEPTH) {
      throw new CheckFailure(`expression nests deeper than ${MAX_EXPRESSION_DEPTH}`, e.id, "depth");
    }
    const kind = e.exprKind;
    switch (kind.case) {
      case "constExpr":
        return { t: constantType(kind.value.constantKind.case, e.id), c: 1 };
      case "identExpr": {
        const t = lookup(kind.value.name);
        if (t === undefined) throw new CheckFailure(`undeclared reference to '${kind.value.name}'`, e.id);
        return { t, c: 1 };
      }
      case "selectExpr": {
        const operand = kind.value.operand;
        if (operand === undefined) throw new CheckFailure("select without operand", e.id);
        const o = visit(operand, depth + 1);
        const t = selectType(o.t, kind.value.field, e.id);
        return { t: kind.value.testOnly ? "bool" : t, c: o.c + 1 };
      }
      case "callExpr": {
        const target = kind.value.target === undefined ? undefined : visit(kind.value.target, depth + 1);
        const args = kind.value.args.map((a) => visit(a, depth + 1));
        const c = (target?.c ?? 0) + args.reduce((s, a) => s + a.c, 0);
        const r = callType(
          kind.value.function,
          target?.t,
          args.map((a) => a.t),
          e.id,
        );
        return { t: r.t, c: c + r.c + concatenationCost(kind.value.function, kind.value.args, r.t) };
      }
      case "listExpr": {
        const elems = kind.value.elements.map((x) => visit(x, depth + 1));
        const elem = elems.length === 0 ? "dyn" : elems.map((x) => x.t).reduce(join);
        return { t: { list: elem }, c: 1 + elems.reduce((s, x) => s + x.c, 0) };
      }
      case "structExpr": {
        if (kind.value.messageName !== "") {
          throw new CheckFailure(`message construction (${kind.value.messageName}) is not available`, e.id);
        }
        let key: CelT | undefined;
        let value: CelT | undefined;
        let c = 1;
        for (const entry of kind.value.entries) {
          if (entry.keyKind.case !== "mapKey" || entry.value === undefined) {
            throw new CheckFailure("a map literal needs key: value entries", e.id);
          }
          const k = visit(entry.keyKind.value, depth + 1);
          const v = visit(entry.value, depth + 1);
          key = key === undefined ? k.t : join(key, k.t);
          value = value === undefined ? v.t : join(value, v.t);
          c += k.c + v.c;
        }
        return { t: { map: [key ?? "dyn", value ?? "dyn"] }, c };
      }
      case "comprehensionExpr": {
        const comp = kind.value;
        if (comp.iterRange === undefined || comp.accuInit === undefined || comp.result === undefined) {
          throw new CheckFailure("incomplete comprehension", e.id);
        }
        if (iterationBound(comp.iterRange) === MAX_ITERATION) iterates = true;
        const range = visit(comp.iterRange, depth + 1);
        const [first, second] = iterationTypes(range.t, comp.iterVar2 !== "", e.id);
        const init = visit(comp.accuInit, depth + 1);
        scopes.push(new Map([[comp.accuVar, init.t]]));
        const loop = new Map([[comp.iterVar, first]]);
        if (comp.iterVar2 !== "") loop.set(comp.iterVar2, second);
        scopes.push(loop);
        const cond =
          comp.loopCondition === undefined
            ? { t: "bool" as CelT, c: 0 }
            : visit(comp.loopCondition, depth + 1);
        const step = comp.loopStep === undefined ? { t: init.t, c: 0 } : visit(comp.loopStep, depth + 1);
        scopes.pop();
        const result = visit(comp.result, depth + 1);
        scopes.pop();
        return {
          t: result.t,
          c: range.c + init.c + iterationBound(comp.iterRange) * (cond.c + step.c + 1) + result.c,
        };
      }
      default:
        throw new CheckFailure("unsupported expression", e.id);
    }
  };

  const { t, c } = visit(expr, 0);
  return { type: t, cost: c, iterates };
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

function noOverload(fn: string, types: readonly CelT[], id: bigint): CheckFailure {
  return new CheckFailure(
    `no matching overload for '${fn}' applied to (${types.map(typeName).join(", ")})`,
    id,
  );
}

function callType(
  fn: string,
  target: CelT | undefined,
  args: readonly CelT[],
  id: bigint,
): { t: CelT; c: number } {
  const all = target === undefined ? args : [target, ...args];
  const [a, b, c] = args;
  const bin = target === undefined && args.length === 2 && a !== undefined && b !== undefined;
  switch (fn) {
    case "_&&_":
    case "_||_":
      if (bin && assignable(a, "bool") && assignable(b, "bool")) return { t: "bool", c: 1 };
      throw noOverload(fn, all, id);
    case "@not_strictly_false":
    case "!_":
      if (target === undefined && args.length === 1 && a !== undefined && assignable(a, "bool"))
        return { t: "bool", c: 1 };
      throw noOverload(fn, all, id);
    case "_?_:_":
      if (
        target === undefined &&
        a !== undefined &&
        b !== undefined &&
        c !== undefined &&
        assignable(a, "bool")
      ) {
        return { t: join(b, c), c: 1 };
      }
      throw noOverload(fn, all, id);
    case "_==_":
    case "_!=_":
      if (bin && comparableForEquality(a, b)) return { t: "bool", c: 1 };
      throw noOverload(fn, all, id);
    case "_<_":
    case "_<=_":
    case "_>_":
    case "_>=_":
      if (bin && orderable(a, b)) return { t: "bool", c: 1 };
      throw noOverload(fn, all, id);
    case "_+_":
    case "_-_":
    case "_*_":
    case "_/_":
    case "_%_":
      if (bin) return { t: arithmetic(fn, a, b, id), c: 1 };
      throw noOverload(fn, all, id);
    case "-_":
      if (
        target === undefined &&
        a !== undefined &&
        (isDyn(a) || a === "int" || a === "double" || a === "duration")
      ) {
        return { t: a, c: 1 };
      }
      throw noOverload(fn, all, id);
    case "_[_]":
      if (bin) return { t: indexType(a, b, id), c: 1 };
      throw noOverload(fn, all, id);
    case "@in":
      if (bin && containerAccepts(b, a)) return { t: "bool", c: 1 };
      throw noOverload(fn, all, id);
    case "size": {
      const x = target ?? a;
      if (args.length === (target === undefined ? 1 : 0) && x !== undefined && sizeable(x))
        return { t: "int", c: 1 };
      throw noOverload(fn, all, id);
    }
    case "dyn":
      if (target === undefined && args.length === 1) return { t: "dyn", c: 1 };
      throw noOverload(fn, all, id);
    case "type":
      if (target === undefined && args.length === 1) return { t: "type", c: 1 };
      throw noOverload(fn, all, id);
  }
  const conversion = CONVERSIONS[fn];
  if (conversion !== undefined) {
    if (
      target === undefined &&
      a !== undefined &&
      args.length === 1 &&
      (isDyn(a) || conversion.from.some((f) => sameType(f, a)))
    ) {
      return { t: conversion.out, c: 1 };
    }
    throw noOverload(fn, all, id);
  }
  const fixed = FIXED[fn];
  if (fixed === undefined) throw new CheckFailure(`unknown function '${fn}'`, id);
  for (const o of fixed.overloads) {
    if ((o.recv === undefined) !== (target === undefined)) continue;
    if (o.recv !== undefined && target !== undefined && !assignable(target, o.recv)) continue;
    if (o.args.length !== args.length || !o.args.every((p, i) => assignable(args[i] as CelT, p))) continue;
    return { t: o.out, c: fixed.cost };
  }
  throw noOverload(fn, all, id);
}

function arithmetic(fn: string, a: CelT, b: CelT, id: bigint): CelT {
  if (isDyn(a) && isDyn(b)) return "dyn";
  if (isDyn(a) || isDyn(b)) {
    const other = isDyn(a) ? b : a;
    if (isNumeric(other) || ["string", "bytes", "timestamp", "duration"].includes(other as string))
      return "dyn";
    if (typeof other !== "string" && "list" in other && fn === "_+_") return "dyn";
    throw noOverload(fn, [a, b], id);
  }
  if (isNumeric(a) && sameType(a, b) && (fn !== "_%_" || a !== "double")) return a;
  if (fn === "_+_") {
    if ((a === "string" || a === "bytes") && a === b) return a;
    if (typeof a !== "string" && typeof b !== "string" && "list" in a && "list" in b)
      return { list: join(a.list, b.list) };
    if (a === "timestamp" && b === "duration") return "timestamp";
    if (a === "duration" && (b === "duration" || b === "timestamp")) return b;
  }
  if (fn === "_-_") {
    if (a === "timestamp" && b === "timestamp") return "duration";
    if (a === "timestamp" && b === "duration") return "timestamp";
    if (a === "duration" && b === "duration") return "duration";
  }
  throw noOverload(fn, [a, b], id);
}

function indexType(container: CelT, key: CelT, id: bigint): CelT {
  if (isDyn(container)) return "dyn";
  if (typeof container !== "string") {
    if ("list" in container && (isNumeric(key) || isDyn(key))) return container.list;
    if ("map" in container && comparableForEquality(container.map[0], key)) return container.map[1];
    if ("record" in container && (key === "string" || isDyn(key))) return "dyn";
  }
  throw noOverload("_[_]", [container, key], id);
}

function containerAccepts(container: CelT, elem: CelT): boolean {
  if (isDyn(container)) return true;
  if (typeof container === "string") return false;
  if ("list" in container) return comparableForEquality(container.list, elem);
  if ("map" in container) return comparableForEquality(container.map[0], elem);
  return elem === "string" || isDyn(elem);
}

function sizeable(t: CelT): boolean {
  return (
    isDyn(t) ||
    t === "string" ||
    t === "bytes" ||
    (typeof t !== "string" && ("list" in t || "map" in t || "record" in t))
  );
}
