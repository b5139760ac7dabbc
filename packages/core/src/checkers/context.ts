// The read-only view of one decide() call that every checker receives.
// It holds the inputs as handed in; checkers must never mutate them (rule 1 memoizes paramsDigest).
import type { DecideInputs, Decision } from "../types.js";
import type { Rec } from "../util/values.js";

export interface DecideContext {
  readonly config: Rec;
  readonly state: Rec;
  readonly call: Rec;
  /** `call.params`, with missing or null read as `{}` (docs/architecture.md §4). Unknown shape until rule 1 passed. */
  readonly params: unknown;
  readonly inputs: DecideInputs;
  /**
   * The params' argument digest, when rule 1 already computed it because rule 4 will compare it (one
   * walk instead of two); null otherwise. The only field a checker writes, and only rule 1.
   */
  paramsDigest: string | null;
}

/** A rule: a Decision when it matches, null to fall through to the next rule. */
export type Checker = (ctx: DecideContext) => Decision | null;
