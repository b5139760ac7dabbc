// The deep copy every record gets at the memory store's boundary, in both directions, so that neither the
// caller's object nor a returned one aliases what is stored. It copies data, not behaviour: no classes kept.

/**
 * A deep copy of a stored record: plain objects and arrays are rebuilt level by level (an object by
 * spread, which defines own properties, so a `__proto__` key stays an own key, as structuredClone
 * keeps it), primitives are shared. Anything else (a Date, a typed array, a Map) goes to
 * structuredClone, which the records never need but which keeps the copy deep should one appear.
 * Like structuredClone, a null-prototype object comes back with Object.prototype. Records are
 * trees: a shared sub-object is copied twice, and a cycle, which no record has, would not end.
 */
export function copyRecord<T>(value: T): T {
  if (typeof value !== "object" || value === null) return value;
  return copyObject(value as object) as T;
}

function copyObject(value: object): object {
  if (Array.isArray(value)) {
    const n = value.length;
    const copy = new Array<unknown>(n);
    for (let i = 0; i < n; i++) {
      const item: unknown = value[i];
      copy[i] = typeof item === "object" && item !== null ? copyObject(item) : item;
    }
    return copy;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return structuredClone(value);
  const copy: Record<string, unknown> = { ...value };
  for (const key in copy) {
    // for…in also lists enumerable keys inherited from a polluted Object.prototype: not the record's.
    if (!Object.hasOwn(copy, key)) continue;
    const item = copy[key];
    if (typeof item === "object" && item !== null) copy[key] = copyObject(item);
  }
  return copy;
}
