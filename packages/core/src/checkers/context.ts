// The read-only view of one decide() call that every checker receives.
// It holds the inputs as handed in; checkers must never mutate it.
import type { DecideInputs, Decision } from "../types.js";
import type { Rec } from "../util/values.js";

export interface DecideContext {
  readonly config: Rec;
  readonly state: Rec;
  readonly call: Rec;
  /** `call.params`, with missing or null read as `{}` (docs/architecture.md §4). Unknown shape until rule 1 passed. */
  readonly params: unknown;
  readonly inputs: DecideInputs;
}

/** A rule: a Decision when it matches, null to fall through to the next rule. */
export type Checker = (ctx: DecideContext) => Decision | null;
