// The engine's side of the policy layer: the policy in force (swappable), its `policy_published` entries,
// and the limit counters, kept per organization with each batch's updates held until its COMMIT.
// It judges nothing itself (policy-layer.ts does). The counters are the fold of the chain's decision
// entries: before a batch judges, entries other engines appended (read under the store's head lock the
// batch already holds) are folded in, so several engines on one store share one count (a limit of n is n).

import type { ChainEntryRecord, SubstrateTx } from "@leash/core";
import { type CompiledPolicy, EMPTY_STATE, loadPolicy, type PolicyState } from "@leash/policy";
import type { ChainHead } from "./audit.js";
import {
  countedAfter,
  countedCallOf,
  type PolicyRecord,
  type StoredPolicyRecord,
  updatesOf,
} from "./policy-layer.js";

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
  /** The decision entry that carries the updates. */
  readonly seq: number;
  readonly hash: string;
}

type Head = ChainHead | null;
const seqOf = (head: Head) => (head === null ? -1 : head.seq);
const sameHead = (a: Head | undefined, b: Head | undefined) =>
  a !== undefined && b !== undefined && seqOf(a) === seqOf(b) && a?.entry_hash === b?.entry_hash;

/** One batch's counter updates, applied to the committed counters when (and only when) it commits. */
export class CounterLayer {
  readonly staged: Staged[] = [];
  /** The chain head the batch opened on, and the one after its entries (set when it has judged). */
  opened: Head | undefined;
  end: Head | undefined;
  /** Per organization, the last view of this layer: from which base, through how many staged updates. */
  readonly views = new Map<string, { base: PolicyState; through: number; state: PolicyState }>();
}

/** `state` after the staged updates of `org` from index `from` on. */
function foldStaged(state: PolicyState, staged: readonly Staged[], org: string, from: number): PolicyState {
  let folded = state;
  for (let i = from; i < staged.length; i++) {
    const s = staged[i]!;
    if (s.org === org) folded = countedAfter(folded, s.record.counter_updates, "ALLOW", s.nowNs);
  }
  return folded;
}

const PAGE = 1000;

export class EnginePolicies {
  readonly #source: PolicySource;
  readonly #committed = new Map<string, PolicyState>();
  readonly #pending: CounterLayer[] = [];
  readonly #published = new Set<string>();
  /** Versions by hash: compiled, or the canonical text of a `policy_published` entry not compiled yet. */
  readonly #versions = new Map<string, CompiledPolicy | string>();
  /** The chain position through which the committed counters hold every decision entry. */
  #through: Head | undefined;
  /** Entries of this engine's committed batches past `#through` (seq → hash): folded already. */
  readonly #ahead = new Map<number, string>();
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
        const last = page.at(-1);
        if (last !== undefined) this.#through = { seq: last.seq, entry_hash: last.entry_hash };
        if (page.length < PAGE) break;
        from = last!.seq + 1;
      }
      this.#through ??= null;
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
      if (typeof data.policy_hash === "string") {
        this.#published.add(data.policy_hash);
        if (typeof data.canonical === "string" && !this.#versions.has(data.policy_hash)) {
          this.#versions.set(data.policy_hash, data.canonical);
        }
      }
      return;
    }
    const record = data.policy as StoredPolicyRecord | null | undefined;
    if (record == null || typeof data.organization_id !== "string" || data.verdict !== "ALLOW") return;
    const nowNs = typeof data.now_ns === "number" ? data.now_ns : Number(timestamp_ns);
    const version = typeof data.policy_hash === "string" ? this.#version(data.policy_hash) : undefined;
    const updates = updatesOf(record, version, countedCallOf(data, nowNs));
    this.#set(data.organization_id, countedAfter(this.#get(data.organization_id), updates, "ALLOW", nowNs));
  }

  /** The version `hash` names: the one in force, or one the chain published (compiled once). */
  #version(hash: string): CompiledPolicy | undefined {
    const current = this.#source.current();
    if (current.hash === hash) return current;
    const known = this.#versions.get(hash);
    if (typeof known !== "string") return known;
    try {
      const compiled = loadPolicy(JSON.parse(known) as object);
      if (compiled.hash !== hash) return undefined;
      this.#versions.set(hash, compiled);
      return compiled;
    } catch {
      return undefined;
    }
  }

  /**
   * Called in a batch's transaction once it has read the chain head (`head`, under the store's write
   * lock): folds in the decision entries appended since this engine's counters were last known, except
   * its own batches' (counted at their COMMIT), so the batch judges on every engine's counts.
   */
  async catchUp(
    layer: CounterLayer,
    head: Head,
    read: (fromSeq: number, limit: number) => Promise<readonly ChainEntryRecord[]>,
  ): Promise<void> {
    layer.opened = head;
    // The common case: the chain ends where this engine's last batch (pending or committed) ended.
    const before = this.#pending[this.#pending.indexOf(layer) - 1];
    if (before !== undefined && sameHead(before.end, head)) return;
    if (this.#through === undefined || sameHead(this.#through, head)) return;
    const own = new Map(this.#ahead);
    for (const pending of this.#pending) for (const s of pending.staged) own.set(s.seq, s.hash);
    const target = seqOf(head);
    let from = seqOf(this.#through) + 1;
    let prev = this.#through?.entry_hash;
    if (target < from - 1) from = target + 1; // the chain is shorter than what was counted: start over
    for (; from <= target; ) {
      const page = await read(from, Math.min(PAGE, target - from + 1));
      // Not the continuation of what was counted (a store restored, or entries counted then rolled
      // back): the counters are folded again from the chain's start.
      if (page[0] === undefined || page[0].seq !== from || (from > 0 && page[0].prev_hash !== prev)) {
        await this.#refold(own, target, read);
        break;
      }
      for (const entry of page) if (own.get(entry.seq) !== entry.entry_hash) this.#fold(entry);
      const last = page[page.length - 1]!;
      from = last.seq + 1;
      prev = last.entry_hash;
    }
    if (target < seqOf(this.#through)) await this.#refold(own, target, read);
    this.#through = head;
    for (const seq of this.#ahead.keys()) if (seq <= target) this.#ahead.delete(seq);
  }

  async #refold(
    own: ReadonlyMap<number, string>,
    target: number,
    read: (fromSeq: number, limit: number) => Promise<readonly ChainEntryRecord[]>,
  ): Promise<void> {
    this.#committed.clear();
    this.#ahead.clear();
    for (let from = 0; from <= target; ) {
      const page = await read(from, Math.min(PAGE, target - from + 1));
      for (const entry of page) if (own.get(entry.seq) !== entry.entry_hash) this.#fold(entry);
      if (page.length === 0) break;
      from = page[page.length - 1]!.seq + 1;
    }
  }

  /**
   * Another transaction of this engine (no decision entries) committed: when it began where the counters
   * were, they now reach its end without reading its entries back. Otherwise a later catch-up reads them.
   */
  /** Runs a transaction of this engine that writes no decision, and tells `passed` where it began and ended. */
  async around<
    T,
    Tx extends SubstrateTx & { headNow(): Head | undefined; readonly currentHead: Head | undefined },
  >(run: (fn: (tx: Tx) => Promise<T>) => Promise<T>, fn: (tx: SubstrateTx) => Promise<T>): Promise<T> {
    let opened: Head | undefined;
    let end: Head | undefined;
    const value = await run(async (tx) => {
      opened = tx.headNow();
      const result = await fn(tx);
      end = tx.currentHead;
      return result;
    });
    this.passed(opened, end);
    return value;
  }

  passed(opened: Head | undefined, end: Head | undefined): void {
    if (this.#pending.length > 0 || end === undefined) return;
    if (sameHead(this.#through, opened)) this.#through = end;
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

  /** An allowed call's updates (recorded in `entry`), counted once its batch commits. */
  stage(
    layer: CounterLayer,
    org: string,
    record: PolicyRecord,
    nowNs: number,
    entry: { readonly seq: number; readonly entry_hash: string },
  ): void {
    if (record.counter_updates.length > 0) {
      layer.staged.push({ org, record, nowNs, seq: entry.seq, hash: entry.entry_hash });
    }
  }

  commit(layer: CounterLayer): void {
    this.#drop(layer);
    const orgs = new Set<string>();
    for (const s of layer.staged) orgs.add(s.org);
    for (const org of orgs) {
      // The batch's last view already folded most of its updates onto these very counters: go on from it.
      const base = this.#get(org);
      const last = layer.views.get(org);
      this.#set(
        org,
        last !== undefined && last.base === base
          ? foldStaged(last.state, layer.staged, org, last.through)
          : foldStaged(base, layer.staged, org, 0),
      );
    }
    // Contiguous with what the counters held: they now reach the batch's end. Else (an entry of
    // another engine may lie between) its entries are remembered so a catch-up does not count them twice.
    if (layer.end !== undefined && this.#through !== undefined && sameHead(this.#through, layer.opened)) {
      this.#through = layer.end;
    } else {
      for (const s of layer.staged) this.#ahead.set(s.seq, s.hash);
    }
  }

  abort(layer: CounterLayer): void {
    this.#drop(layer);
  }

  #drop(layer: CounterLayer): void {
    const at = this.#pending.indexOf(layer);
    if (at >= 0) this.#pending.splice(at, 1);
  }
}

/** Reads a page of the chain in `tx`. */
export function chainRange(
  tx: SubstrateTx,
): (fromSeq: number, limit: number) => Promise<readonly ChainEntryRecord[]> {
  return (fromSeq, limit) => tx.chain.range(fromSeq, limit);
}

/** Reads a page of the chain in its own read transaction. */
export function chainPages(
  transaction: <T>(fn: (tx: SubstrateTx) => Promise<T>) => Promise<T>,
): (fromSeq: number, limit: number) => Promise<readonly ChainEntryRecord[]> {
  return (fromSeq, limit) => transaction((tx) => tx.chain.range(fromSeq, limit));
}
