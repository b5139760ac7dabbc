// Rule 7: `hitl_mode: "always"` sends every call that reached this rule to a human.
// The mode is compared trimmed and lowercased, so a sloppy "ALWAYS" still fails closed.
import { hitl } from "../decision.js";
import { norm } from "../util/values.js";
import type { DecideContext } from "./context.js";

const ALWAYS = hitl("hitl_all_calls");

export function checkHitlAlways(ctx: DecideContext) {
  return norm(ctx.config.hitl_mode) === "always" ? ALWAYS : null;
}
