// State after a HITL verdict (spec §5.3): the session pauses and records which call awaits a human.
// The human's answer arrives later as a pending transition (see operator.ts), not here.
import type { Call, Nonce, Reason, State } from "../types.js";
import { present } from "../util/values.js";

export function afterHitl(state: State, call: Call, reason: Reason, paramsHash: string | null): State {
  return {
    ...state,
    status: "PAUSED",
    pending_request: {
      nonce: present(call.nonce) ? (call.nonce as Nonce) : null,
      args_digest: paramsHash,
      tool_name: call.tool_name,
      reason,
    },
  };
}
