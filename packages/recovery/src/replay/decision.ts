// A decision entry folded: its command and env read from the entry, the state machine's evaluate on the
// fold, one structural diff of the entry it derives against the recorded one, then its events applied.
// Entries written before replay inputs are folded on their recorded verdict (the mode below, replay's own).
import type { Nonce, SessionRecord, State } from "@leash/core";
import { parseJsonKeepingNumberText } from "@leash/core";
import {
  countedAfter,
  countedCallOf,
  HITL_TIMEOUT,
  PARAMS_HASH_MISMATCH,
  type PolicyRecord,
  policyStep,
  type StoredPolicyRecord,
  TOOL_MISMATCH,
  updatesOf,
} from "@leash/engine";
import {
  DEFAULT_HOLD_TTL_NS,
  decide,
  type EngineDecision,
  type Env,
  type EvaluateCommand,
  type EvaluateReply,
  type MachineEvent,
  nodeSha256Hex,
  type RecordedParams,
} from "@leash/machine";
import { type CompiledPolicy, EMPTY_STATE, type PolicyState } from "@leash/policy";
import { expectEntry, expectEqual, expectPolicyRecord, FIRST, Mismatch } from "./diff.js";
import type { FoldView } from "./fold-view.js";

type Data = Record<string, unknown>;

/** Params that rule 1 refuses: what a recorded `params_json: null` stands for. */
const NON_CANONICAL = Object.freeze({ value: Number.NaN });

/** Request ids of HITL requests opened by entries that did not record them; named by a later hitl_decision. */
export const UNNAMED = "unnamed-request:";

/**
 * A number literal JSON.parse might read differently from Python (a fraction, an exponent, 16 or
 * more digits): only then is the slower parser that keeps number text needed.
 */
const RISKY_NUMBER = /[0-9][.eE]|[0-9]{16}/;

/** The params as the engine saw them, from their recorded canonical text. */
function readParams(text: string): unknown {
  return RISKY_NUMBER.test(text) ? parseJsonKeepingNumberText(text) : JSON.parse(text);
}

/** What the decision fold needs of the replayer. */
export interface DecisionFold {
  readonly view: FoldView;
  session(data: Data): SessionRecord;
  policyOf(data: Data): CompiledPolicy | undefined;
  readonly policyCounters: Map<string, PolicyState>;
  storedParams(hash: string): Promise<string | null>;
  /** A request opened unnamed takes the name the first entry that shows it gives (legacy entries). */
  rename(from: string, to: string): void;
}

/** The params of a provable entry, inline or stored by digest, as the machine's recorded params. */
async function paramsOf(
  fold: DecisionFold,
  data: Data,
): Promise<{ value: unknown; recorded: RecordedParams }> {
  const text = data.params_json;
  const hash = data.params_hash as string | null;
  if (typeof text === "string") {
    return {
      value: readParams(text),
      recorded: { text, hash: nodeSha256Hex(text), bytes: null, blob: false },
    };
  }
  if (data.params_blob === true && typeof hash === "string") {
    // Stored once by digest beside the chain: the text must be there and hash to the signed digest.
    const stored = await fold.storedParams(hash);
    if (stored === null) {
      throw new Mismatch(
        "params_blob",
        hash,
        null,
        `the params of digest ${hash} are not stored beside the chain`,
      );
    }
    return {
      value: readParams(stored),
      recorded: { text: stored, hash: nodeSha256Hex(stored), bytes: null, blob: true },
    };
  }
  // Params over the cap were recorded by digest and size alone: the cap decides, not decide().
  if (typeof data.params_bytes === "number") {
    return { value: NON_CANONICAL, recorded: { text: null, hash, bytes: data.params_bytes, blob: false } };
  }
  return { value: NON_CANONICAL, recorded: { text: null, hash: null, bytes: null, blob: false } };
}

/** An entry before replay inputs: its recorded verdict, as the engine's own constants where it names one. */
function recordedVerdict(data: Data): EngineDecision {
  const reason = data.reason;
  if (reason === TOOL_MISMATCH.reason) return TOOL_MISMATCH;
  if (reason === PARAMS_HASH_MISMATCH.reason) return PARAMS_HASH_MISMATCH;
  if (reason === HITL_TIMEOUT.reason) return HITL_TIMEOUT;
  return { verdict: data.verdict, reason } as EngineDecision;
}

/** The entry's command: the call as the engine had it, read back from what the entry records. */
async function commandOf(fold: DecisionFold, data: Data, session: SessionRecord, provable: boolean) {
  const malformed = data.tool_name === null && data.input_problem !== undefined;
  const policy = fold.policyOf(data);
  const counters = (org: string) => fold.policyCounters.get(org) ?? EMPTY_STATE;
  const params = provable
    ? await paramsOf(fold, data)
    : {
        value: {},
        recorded: { text: null, hash: data.params_hash as string | null, bytes: null, blob: false },
      };
  const command: EvaluateCommand = {
    kind: "evaluate",
    sessionId: session.session_id,
    malformed: malformed ? String(data.input_problem) : null,
    toolName: malformed ? "" : (data.tool_name as string),
    params: params.value,
    recordedParams: params.recorded,
    nonce: malformed ? undefined : (data.nonce as Nonce | null),
    estimatedCostUsd: data.estimated_cost_usd,
    previousError: data.previous_error,
    expectedHash: data.expected_params_hash as string | null | undefined,
    rules: typeof data.replay_inputs === "number" ? data.replay_inputs : 0,
    ...(policy === undefined ? {} : { policy: policyStep(policy, counters) }),
    ...(provable ? {} : { foldVerdict: recordedVerdict(data) }),
  };
  return { command, policy };
}

/** The entry's env: the time, the draw, the id and the TTL it recorded. */
function envOf(data: Data, session: SessionRecord): Env {
  const ttl = data.hold_ttl_ns;
  const named = data.hitl_request_id;
  return {
    nowNs: Number(data.now_ns),
    rng: () => (data.rng ?? null) as number,
    newId: () =>
      typeof named === "string" ? named : `${UNNAMED}${session.session_id}#${session.call_count + 1}`,
    holdTtlNs: typeof ttl === "number" && ttl > 0 ? ttl : DEFAULT_HOLD_TTL_NS,
  };
}

/** Fields compared on their own, or recorded in an older shape than the machine writes. */
function skipped(data: Data): Set<string> {
  const skip = new Set(["replay_inputs", "policy", "state"]);
  if (data.hitl_request_id === undefined) skip.add("hitl_request_id");
  if (data.hold_ttl_ns === undefined) skip.add("hold_ttl_ns");
  return skip;
}

/** What an entry folded on its recorded verdict is still checked for: the outcome, not the inputs. */
const OUTCOME = FIRST.filter((field) => field !== "params_hash" && field !== "params_bytes");

/**
 * Folds one decision entry. Returns whether its verdict was re-derived (false: folded on the recorded
 * verdict). @throws Mismatch when what it records does not follow from the entries before.
 */
export async function foldDecision(fold: DecisionFold, index: number, data: Data): Promise<boolean> {
  const session = fold.session(data);
  const provable = data.replay_inputs !== undefined;
  // Entries of replay inputs 1 carry the state decide() saw; a request it names is named from here on.
  if (data.state !== undefined) nameFromState(fold, session, data.state);
  const current = fold.session(data);
  const { command, policy } = await commandOf(fold, data, current, provable);
  const outcome = decide(fold.view, command, envOf(data, current));
  if ("error" in outcome)
    throw new Mismatch("session_id", "a session", data.session_id, outcome.error.message);
  if (!("events" in outcome)) throw new Mismatch("entry", "a decidable call", null, "the fold lacks a row");
  const reply = outcome.reply as EvaluateReply;
  if (data.state !== undefined) expectEqual("state", reply.seen, data.state);
  const entry = outcome.events.find(
    (e): e is Extract<MachineEvent, { type: "entry" }> => e.type === "entry" && e.kind === "decision",
  )!;
  expectEntry(entry.data, data, provable ? { skip: skipped(data) } : { only: OUTCOME });
  const judged = reply.policyRecord as PolicyRecord | null;
  if (policy !== undefined && provable) expectPolicyRecord(policy.hash, judged, data);
  if (policy !== undefined) {
    const org = current.organization_id;
    const counters = fold.policyCounters.get(org) ?? EMPTY_STATE;
    const record = provable ? judged : ((data.policy ?? null) as StoredPolicyRecord | null);
    const nowNs = Number(data.now_ns);
    const updates = updatesOf(record, policy, countedCallOf(data, nowNs));
    fold.policyCounters.set(org, countedAfter(counters, updates, reply.decision.verdict, nowNs));
  }
  await fold.view.apply(index, outcome.events);
  return provable;
}

/** A request opened by an entry that did not name it takes its name from the first entry that shows it. */
function nameFromState(fold: DecisionFold, session: SessionRecord, recorded: unknown): void {
  const pending = session.state.pending_request as { request_id?: unknown } | null | undefined;
  const shown = (recorded as State | null)?.pending_request as { request_id?: unknown } | null | undefined;
  if (
    typeof pending?.request_id === "string" &&
    pending.request_id.startsWith(UNNAMED) &&
    typeof shown?.request_id === "string"
  ) {
    fold.rename(pending.request_id, shown.request_id);
  }
}
