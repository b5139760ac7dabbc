// The repeat count a call was judged with: the consecutive identical calls of its tool before it, as
// rule 6 reads them (SP/1.0 §4.3 `repeat_count`, Appendix A). Reporting only; it decides nothing.
import type { State } from "@leash/core";

/** What rule 6 counted for `toolName` in the state decide() saw; 0 when another tool ran last. */
export function repeatSeen(state: State, toolName: string): number {
  if (toolName === "" || state.last_tool_name !== toolName) return 0;
  const count = state.repeat_counts?.[toolName];
  return typeof count === "number" && Number.isSafeInteger(count) && count > 0 ? count : 0;
}
