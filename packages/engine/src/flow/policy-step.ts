// The operator's policy as the state machine's policy step: policy-layer.ts's pure functions with the
// organization's counters bound. The engine binds its batch's counter layer; the replay its fold's.
import type { PolicyStep } from "@leash/machine";
import type { CompiledPolicy, CounterReader, PolicyState } from "@leash/policy";
import {
  estimateWithPolicy,
  isPolicyReason,
  judgeByPolicy,
  type PolicyRecord,
  policyFields,
} from "../policy-layer.js";

/** The step for `policy`, judging with `counters(organization)` (the counters before this call). */
export function policyStep(
  policy: CompiledPolicy,
  counters: (organizationId: string) => PolicyState | CounterReader,
): PolicyStep<PolicyRecord> {
  return {
    hash: policy.hash,
    estimate: (toolName, session, given) => estimateWithPolicy(policy, toolName, session, given),
    judge: (input) => judgeByPolicy({ ...input, policy, counters: counters(input.session.organization_id) }),
    fields: (record) => policyFields(policy.hash, record),
    isPolicyReason,
  };
}
