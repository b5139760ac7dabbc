// The one base of every error class Leash throws: a stable snake_case `code`, `cause` kept, and the
// marker check written once. It says nothing about verdicts: a DENY or a failed verification is a result.

/** The marker every Leash error carries, whatever its package. */
const BASE_MARKER = Symbol.for("leash.error");

/**
 * Extend it once per error family (`class ChainError extends LeashBaseError<ChainErrorCode>`), giving
 * the family `static override readonly marker = Symbol.for("leash.<package>.<name>")`. Every
 * instance carries the marker of its class and of each class above it, so `ChainError.isInstance(e)`
 * holds across two copies of a package in one process (a bundling accident, a dual install), where
 * `instanceof` would not.
 */
export abstract class LeashBaseError<Code extends string = string> extends Error {
  /** Overridden by every family; the base's own marks any Leash error. */
  static readonly marker: symbol = BASE_MARKER;
  /**
   * A family whose codes were renamed lists the old spellings here (`{ invalid_argument: "invalid_input" }`),
   * so `legacyCode` can answer with them for one release.
   */
  static readonly legacyCodes: Readonly<Record<string, string>> = {};
  /** Stable, snake_case, meant for programs; `message` is for people. */
  readonly code: Code;

  constructor(code: Code, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    for (let c: unknown = new.target; typeof c === "function" && c !== Error; c = Object.getPrototypeOf(c)) {
      if (Object.hasOwn(c, "marker")) {
        Object.defineProperty(this, (c as unknown as { marker: symbol }).marker, {
          value: true,
          enumerable: false,
        });
      }
    }
  }

  /**
   * @deprecated The code as this family spelled it before codes were unified (`invalid_input`,
   * `INVALID_ARGUMENT`, …); compare `code` instead. Removed in the next minor release.
   */
  get legacyCode(): string {
    const renamed = (this.constructor as typeof LeashBaseError).legacyCodes;
    return Object.hasOwn(renamed, this.code) ? (renamed[this.code] as string) : this.code;
  }

  /** Whether `error` is an instance of the class this is called on (by marker, not by prototype). */
  static isInstance<T>(this: { readonly prototype: T; readonly marker: symbol }, error: unknown): error is T {
    // biome-ignore lint/complexity/noThisInStatic: `this` is the class it is called on, whose marker is checked.
    const marker = this.marker;
    return typeof error === "object" && error !== null && (error as Record<symbol, unknown>)[marker] === true;
  }
}

/** Whether `error` is any error a Leash package threw. */
export function isLeashError(error: unknown): error is LeashBaseError {
  return (
    typeof error === "object" && error !== null && (error as Record<symbol, unknown>)[BASE_MARKER] === true
  );
}
