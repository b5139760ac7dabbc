// Rule 2: a tripped circuit denies every (canonicalizable) call until an operator resets it.
// Tripping is feedback's job; this only reads the flag, with Python truthiness.
import { deny } from "../decision.js";
import { truthy } from "../util/values.js";
import type { DecideContext } from "./context.js";

const OPEN = deny("circuit_open");

export function checkCircuit(ctx: DecideContext) {
  return truthy(ctx.state.circuit_tripped) ? OPEN : null;
}
