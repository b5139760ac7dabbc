// State after a DENY (spec §5.3): the circuit trips, session-wide, until an operator resets it.
// Nothing else changes: a denied call spends nothing and counts nothing.
import type { Reason, State } from "../types.js";
import { truthy } from "../util/values.js";

export function afterDeny(state: State, reason: Reason, nowNs: number): State {
  if (truthy(state.circuit_tripped)) return state; // keep the first trip's reason and time
  return { ...state, circuit_tripped: true, circuit_trip_reason: reason, circuit_tripped_at_ns: nowNs };
}
