// Tracing of the engine's calls: the then() handlers that end a span with its answer's attributes.
// Spans only; tracing.ts opens them.
import { defined, type EngineSpan } from "../tracing.js";
import type { EvaluateResult, PostExecResult, SessionView } from "../types.js";

/** A remaining budget as a span attribute: a number dashboards can plot (the exact text is in the chain). */
function budgetAttribute(remaining: string | null): number | undefined {
  return remaining === null ? undefined : Number(remaining);
}
/**
 * then() handlers that end a span with its answer's attributes: a DENY is an answer, not an error;
 * only a rejection marks the span as failed.
 */
export function endSpan<T>(span: EngineSpan, attributesOf: (answer: T) => Parameters<typeof defined>[0]) {
  return [
    (answer: T) => {
      span.set(defined(attributesOf(answer)));
      span.end();
      return answer;
    },
    (error: unknown): never => {
      span.end(error);
      throw error;
    },
  ] as const;
}
export const evaluateAttributes = (result: EvaluateResult) => ({
  "leash.verdict": result.verdict,
  "leash.reason": result.reason,
  "leash.session_id": result.session_id,
  "leash.call_number": result.call_number,
  "leash.budget_remaining_usd": budgetAttribute(result.budget_remaining_usd),
  "leash.chain.seq": result.entry_seq,
});
export const postExecAttributes = (result: PostExecResult) => ({
  "leash.budget_remaining_usd": budgetAttribute(result.budget_remaining_usd),
  "leash.actual_usd": Number(result.actual_usd),
  "leash.overrun_usd": Number(result.overrun_usd),
  "leash.replayed": result.replayed,
  "leash.late": result.late,
});
export const resumeAttributes = (view: SessionView) => ({
  "leash.session_status": view.status,
  "leash.budget_remaining_usd": budgetAttribute(view.budget_remaining_usd),
});
