// The engine's side of the policy layer: the policy in force (swappable), its `policy_published` entries,
// and the limit counters, kept per organization with each batch's updates held until its COMMIT.
// It judges nothing itself (policy-layer.ts does) and is not shared by several engines on one store.

import type { ChainEntryRecord, SubstrateTx } from "@leash/core";
import { type CompiledPolicy, EMPTY_STATE, type PolicyState } from "@leash/policy";
import { countedAfter, type PolicyRecord, type StoredPolicyRecord } from "./policy-layer.js";

/** A policy that may change while the engine runs (the daemon's reload swaps it). */
export interface PolicySource {
  current(): CompiledPolicy;
}

/** The entry kind that publishes a policy version: its canonical text and hash. */
export const POLICY_PUBLISHED = "policy_published";

/** The data of a `policy_published` entry. */
export function publishedData(policy: CompiledPolicy): Record<string, unknown> {
  return { policy_hash: policy.hash, name: policy.name, canonical: policy.canonical };
}

interface Staged {
  readonly org: string;
  readonly record: PolicyRecord;
  readonly nowNs: number;
}

/** One batch's counter updates, applied to the committed counters when (and only when) it commits. */
export class CounterLayer {
  readonly staged: Staged[] = [];
  /** Per organization, the last view of this layer: from which base, through how many staged updates. */
  readonly views = new Map<string, { base: PolicyState; through: number; state: PolicyState }>();
}

/** `state` after the staged updates of `org` from index `from` on. */
function foldStaged(state: PolicyState, staged: readonly Staged[], org: string, from: number): PolicyState {
  let folded = state;
  for (let i = from; i < staged.length; i++) {
    const s = staged[i]!;
    if (s.org === org) folded = countedAfter(folded, s.record, "ALLOW", s.nowNs);
  }
  return folded;
}

const PAGE = 1000;

export class EnginePolicies {
  readonly #source: PolicySource;
  readonly #committed = new Map<string, PolicyState>();
  readonly #pending: CounterLayer[] = [];
  readonly #published = new Set<string>();
  readonly #publishing = new Map<string, Promise<void>>();
  #loaded: Promise<void> | undefined;
  #loadedDone = false;

  constructor(policy: CompiledPolicy | PolicySource) {
    this.#source =
      "current" in policy && typeof policy.current === "function"
        ? policy
        : { current: () => policy as CompiledPolicy };
  }

  /** The policy in force now. */
  current(): CompiledPolicy {
    return this.#source.current();
  }

  /** The policy in force when the counters are loaded and it is published (no wait needed), else undefined. */
  ready(): CompiledPolicy | undefined {
    if (!this.#loadedDone) return undefined;
    const policy = this.#source.current();
    return this.#published.has(policy.hash) ? policy : undefined;
  }

  /** Runs `publish` once per version (concurrent first calls share it); a failed one is tried again. */
  publishOnce(hash: string, publish: () => Promise<void>): Promise<void> {
    if (this.#published.has(hash)) return Promise.resolve();
    let running = this.#publishing.get(hash);
    if (running === undefined) {
      running = publish().then(
        () => {
          this.#published.add(hash);
          this.#publishing.delete(hash);
        },
        (error: unknown) => {
          this.#publishing.delete(hash);
          throw error;
        },
      );
      this.#publishing.set(hash, running);
    }
    return running;
  }

  /**
   * Once, before the first call: folds the chain's decision entries into the counters and learns which
   * versions are published, so a restart neither resets a limit nor publishes a known version again.
   */
  load(read: (fromSeq: number, limit: number) => Promise<readonly ChainEntryRecord[]>): Promise<void> {
    this.#loaded ??= (async () => {
      for (let from = 0; ; ) {
        const page = await read(from, PAGE);
        for (const entry of page) this.#fold(entry);
        if (page.length < PAGE) break;
        from = page[page.length - 1]!.seq + 1;
      }
      this.#loadedDone = true;
    })();
    return this.#loaded;
  }

  #fold(entry: ChainEntryRecord): void {
    if (entry.kind !== POLICY_PUBLISHED && entry.kind !== "decision") return;
    const { data, timestamp_ns } = JSON.parse(entry.body) as {
      data: Record<string, unknown>;
      timestamp_ns: string;
    };
    if (entry.kind === POLICY_PUBLISHED) {
      if (typeof data.policy_hash === "string") this.#published.add(data.policy_hash);
      return;
    }
    const record = data.policy as StoredPolicyRecord | null | undefined;
    if (record == null || typeof data.organization_id !== "string") return;
    const nowNs = typeof data.now_ns === "number" ? data.now_ns : Number(timestamp_ns);
    this.#set(
      data.organization_id,
      countedAfter(this.#get(data.organization_id), record, String(data.verdict), nowNs),
    );
  }

  #get(org: string): PolicyState {
    return this.#committed.get(org) ?? EMPTY_STATE;
  }

  #set(org: string, state: PolicyState): void {
    this.#committed.set(org, state);
  }

  /** A new batch's layer (on top of batches judged and not yet committed). */
  begin(): CounterLayer {
    const layer = new CounterLayer();
    this.#pending.push(layer);
    return layer;
  }

  /** The organization's counters as `layer` sees them: committed, then every pending layer up to it. */
  view(layer: CounterLayer, org: string): PolicyState {
    let base = this.#get(org);
    let own = false;
    for (const pending of this.#pending) {
      if (pending === layer) {
        own = true;
        break;
      }
      base = foldStaged(base, pending.staged, org, 0);
    }
    if (!own) return base;
    // Each call of a batch sees the one before it: fold only what was staged since the last view,
    // the same updates in the same order as folding them all again.
    const last = layer.views.get(org);
    const state =
      last !== undefined && last.base === base
        ? foldStaged(last.state, layer.staged, org, last.through)
        : foldStaged(base, layer.staged, org, 0);
    layer.views.set(org, { base, through: layer.staged.length, state });
    return state;
  }

  /** An allowed call's updates, counted once its batch commits. */
  stage(layer: CounterLayer, org: string, record: PolicyRecord, nowNs: number): void {
    if (record.counter_updates.length > 0) layer.staged.push({ org, record, nowNs });
  }

  commit(layer: CounterLayer): void {
    this.#drop(layer);
    for (const s of layer.staged)
      this.#set(s.org, countedAfter(this.#get(s.org), s.record, "ALLOW", s.nowNs));
  }

  abort(layer: CounterLayer): void {
    this.#drop(layer);
  }

  #drop(layer: CounterLayer): void {
    const at = this.#pending.indexOf(layer);
    if (at >= 0) this.#pending.splice(at, 1);
  }
}

/** Reads a page of the chain in its own read transaction. */
export function chainPages(
  transaction: <T>(fn: (tx: SubstrateTx) => Promise<T>) => Promise<T>,
): (fromSeq: number, limit: number) => Promise<readonly ChainEntryRecord[]> {
  return (fromSeq, limit) => transaction((tx) => tx.chain.range(fromSeq, limit));
}
