// String helpers shared by the structural check and the serializer: surrogates, escaping, key order.
// They do not walk values; callers decide when a string needs the slow path.

/** Any UTF-16 surrogate unit. One native scan, so the common (BMP-only) string costs almost nothing. */
export const SURROGATE = /[\uD800-\uDFFF]/;

/**
 * Everything that stops a string from being written as `"` + s + `"`: a quote, a backslash, a
 * control character (all need escapes) or a surrogate (needs the pairing check and, in keys,
 * code-point ordering). One test per string keeps the common case to a single native scan.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding C0 controls is the point (they need escapes).
export const NEEDS_CARE = /["\\\u0000-\u001F\uD800-\uDFFF]/;

/** True when `s` has a surrogate unit that is not half of a well-formed pair. */
export function hasLoneSurrogate(s: string): boolean {
  const n = s.length;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c < 0xd800 || c > 0xdfff) continue;
    if (c <= 0xdbff && i + 1 < n) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        i++;
        continue;
      }
    }
    return true;
  }
  return false;
}

/**
 * Orders strings by Unicode code point, as Python's `sorted()` does.
 * UTF-16 unit order agrees except where a surrogate (a code point ≥ U+10000) meets a unit in
 * U+E000–U+FFFF: there the surrogate must sort after, so both are shifted before comparing.
 */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x !== y) {
      if (x >= 0xd800 && y >= 0xd800) {
        x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
        y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
      }
      return x - y;
    }
  }
  return a.length - b.length;
}

/**
 * Sorts keys in place by UTF-16 unit, which equals code-point order when no key holds a surrogate.
 * Params objects are small, and insertion sort on a handful of keys beats Array#sort's setup cost.
 */
export function sortKeysByUnits(keys: string[]): void {
  const n = keys.length;
  if (n > 16) {
    keys.sort();
    return;
  }
  for (let i = 1; i < n; i++) {
    const k = keys[i]!;
    let j = i - 1;
    while (j >= 0 && keys[j]! > k) {
      keys[j + 1] = keys[j]!;
      j--;
    }
    keys[j + 1] = k;
  }
}
