// The variables a rule's condition sees for one call, each built the first time a condition names it and
// kept for the call's other conditions, already in CEL's own form. It evaluates nothing (condition.ts runs).
import { type CelInput, celList, celMap } from "@bufbuild/cel";

/** The parts of a call the bindings are made of (evaluate.ts's PolicyInput, with its tags). */
export interface BindingsInput {
  readonly tool: string;
  readonly agent: string;
  readonly org?: string;
  readonly args?: unknown;
  readonly argsOf?: () => unknown;
  readonly session?: {
    readonly id?: string;
    readonly calls?: number;
    readonly repeat?: number;
    readonly denied?: number;
    readonly spent_usd?: number;
  };
  readonly budget?: {
    readonly limit_usd?: number;
    readonly spent_usd?: number;
    readonly remaining_usd?: number;
  };
  readonly estimate_usd?: number;
  readonly time: { readonly unix_s: number };
}

/** A counter as a CEL int; a missing or non-finite one is 0. */
const int = (n: number | undefined) => (n !== undefined && Number.isFinite(n) ? BigInt(Math.trunc(n)) : 0n);

/** `n mod m` in [0, m), also for negative `n` (times before 1970). */
const floorMod = (n: number, m: number) => ((n % m) + m) % m;

/**
 * What @bufbuild/cel's own conversion makes of a value JSON.parse gave: a list for an array, a map of
 * its entries for an object whose constructor is Object. Anything else (a `$typeName` key, which the
 * library reads as a protobuf message, or an own `constructor`) is left for the library to convert.
 */
function celOfJson(value: unknown): unknown {
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) return celList(value as CelInput[]);
  if ("$typeName" in value || value.constructor !== Object) return value;
  return celMap(new Map(Object.entries(value as Record<string, CelInput>)));
}

const UNSET = Symbol("unset");

/**
 * A condition's variables for one call (the names CONDITION_VARIABLES declares), read by the CEL
 * activation by name: a variable no condition names is never computed (the args are not even parsed),
 * and the records, lists and maps are converted to CEL values once, not at every reference. The
 * values are exactly those of the plain bindings (the same entries in the same order).
 */
export class CallBindings {
  readonly #input: BindingsInput;
  readonly #tags: readonly string[];
  #plain: unknown = UNSET;
  #args: unknown = UNSET;
  #celTags: unknown = UNSET;
  #session: unknown = UNSET;
  #budget: unknown = UNSET;
  #time: unknown = UNSET;

  constructor(input: BindingsInput, tags: readonly string[]) {
    this.#input = input;
    this.#tags = tags;
  }

  get tool(): string {
    return this.#input.tool;
  }
  get agent(): string {
    return this.#input.agent;
  }
  get org(): string {
    return this.#input.org ?? "";
  }
  get estimate_usd(): number {
    return this.#input.estimate_usd ?? 0;
  }
  get has_estimate(): boolean {
    return this.#input.estimate_usd !== undefined;
  }

  /** The args as CEL sees them: a caller's own value as given (the library converts it), parsed ones converted once. */
  get args(): unknown {
    if (this.#args === UNSET) {
      const plain = this.plainArgs();
      this.#args = plain === this.#input.args ? plain : celOfJson(plain);
    }
    return this.#args;
  }

  /** The args as plain values (what the bound check of an iterating rule walks): given, else parsed once. */
  plainArgs(): unknown {
    if (this.#plain === UNSET) this.#plain = this.#input.args ?? this.#input.argsOf?.() ?? {};
    return this.#plain;
  }

  get tags(): unknown {
    if (this.#celTags === UNSET) this.#celTags = celList(this.#tags as string[]);
    return this.#celTags;
  }

  get session(): unknown {
    if (this.#session === UNSET) {
      const s = this.#input.session ?? {};
      this.#session = celMap(
        new Map<string, CelInput>([
          ["id", s.id ?? ""],
          ["calls", int(s.calls)],
          ["repeat", int(s.repeat)],
          ["denied", int(s.denied)],
          ["spent_usd", s.spent_usd ?? 0],
        ]),
      );
    }
    return this.#session;
  }

  get budget(): unknown {
    if (this.#budget === UNSET) {
      const b = this.#input.budget ?? {};
      const limit = b.limit_usd ?? Number.POSITIVE_INFINITY;
      const spent = b.spent_usd ?? 0;
      this.#budget = celMap(
        new Map<string, CelInput>([
          ["limit_usd", limit],
          ["spent_usd", spent],
          ["remaining_usd", b.remaining_usd ?? limit - spent],
        ]),
      );
    }
    return this.#budget;
  }

  /** UTC calendar fields by arithmetic (no Date per call): 1970-01-01 was a Thursday (4). */
  get time(): unknown {
    if (this.#time === UNSET) {
      const unix = Math.floor(this.#input.time.unix_s);
      this.#time = celMap(
        new Map<string, CelInput>([
          ["unix_s", BigInt(unix)],
          ["hour_utc", BigInt(floorMod(Math.floor(unix / 3600), 24))],
          ["minute_utc", BigInt(floorMod(Math.floor(unix / 60), 60))],
          ["weekday_utc", BigInt(floorMod(Math.floor(unix / 86_400) + 4, 7))],
        ]),
      );
    }
    return this.#time;
  }
}
