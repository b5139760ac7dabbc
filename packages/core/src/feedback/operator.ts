// Operator actions on state: reset a tripped circuit, and record a human's HITL decision.
// They are the only ways out of DENY/HITL; the runtime must audit who did them.
import type { PendingTransition, State } from "../types.js";

/**
 * Closes the circuit and forgets the repeat run that tripped it; budget, nonces and counts stay.
 * A resolved human transition (reject, consumed, superseded…) is cleared too: otherwise rule 4 would
 * deny every later call again and the reset could never take effect. A still-open request stays.
 */
export function resetCircuit(state: State): State {
  const open = state.status === "PAUSED" && state.pending_transition == null;
  return {
    ...state,
    circuit_tripped: false,
    circuit_trip_reason: null,
    circuit_tripped_at_ns: null,
    repeat_counts: {},
    pending_transition: open ? state.pending_transition : null,
    pending_request: open ? state.pending_request : null,
    status: open ? "PAUSED" : "ACTIVE",
  };
}

/**
 * Records a human decision on the paused call as the pending transition that rule 4 resolves.
 * `approve` binds the paused call's nonce and digest; `modify` binds the successor the human gave.
 */
export function recordHumanDecision(
  state: State,
  decision: "approve" | "reject" | "modify" | "defer" | "escalate",
  successor?: { nonce: string | number; argsDigest: string },
): State {
  const request = state.pending_request;
  const transition: PendingTransition = {
    decision,
    original_nonce: request?.nonce ?? null,
    original_args_digest: request?.args_digest ?? null,
    terminal_status: decision === "reject" ? "rejected" : decision === "modify" ? "superseded" : "pending",
  };
  if (decision === "modify" && successor) {
    transition.successor_nonce = successor.nonce;
    transition.successor_args_digest = successor.argsDigest;
  }
  return {
    ...state,
    status: decision === "defer" || decision === "escalate" ? "PAUSED" : "ACTIVE",
    pending_transition: transition,
  };
}
