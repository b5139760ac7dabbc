// The functions and operators a policy condition may call, with their signatures and costs: what the
// checker in check.ts consults for every call node. It evaluates nothing.
import {
  assignable,
  type CelT,
  CheckFailure,
  comparableForEquality,
  isDyn,
  isNumeric,
  join,
  orderable,
  sameType,
  typeName,
} from "./cel-types.js";

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

function noOverload(fn: string, types: readonly CelT[], id: bigint): CheckFailure {
  return new CheckFailure(
    `no matching overload for '${fn}' applied to (${types.map(typeName).join(", ")})`,
    id,
  );
}

/** An operator's (or a built-in's) result type and cost; undefined when `fn` is none of them. */
function operatorType(
  fn: string,
  target: CelT | undefined,
  args: readonly CelT[],
  id: bigint,
): { t: CelT; c: number } | undefined {
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
  return undefined;
}

/** The type and cost of a call: an operator, a conversion or a function; throws CheckFailure. */
export function callType(
  fn: string,
  target: CelT | undefined,
  args: readonly CelT[],
  id: bigint,
): { t: CelT; c: number } {
  const operator = operatorType(fn, target, args, id);
  if (operator !== undefined) return operator;
  const all = target === undefined ? args : [target, ...args];
  const [a] = args;
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
