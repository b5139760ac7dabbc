// The counters limit rules keep (calls per rate window, micro-dollars per budget period), as plain JSON,
// and the pure transition that applies a decision's updates. No clock: the call's time is an input.
import type { Per, Period } from "./schema.js";

/** One counter: the window or period [start, end) in unix seconds, and what was counted in it. */
export interface PolicyCounter {
  readonly start: number;
  readonly end: number;
  /** Calls for a rate rule; micro-dollars (integer) for a budget rule. */
  readonly count: number;
}

/** Every counter of one policy, by key (`rule`, scope and scope value); JSON-serialisable. */
export interface PolicyState {
  readonly counters: Readonly<Record<string, PolicyCounter>>;
  /** The latest time (Unix seconds) updates were applied at; absent before any. */
  readonly now?: number;
}

export const EMPTY_STATE: PolicyState = { counters: {} };

export interface CounterUpdate {
  readonly key: string;
  readonly start: number;
  readonly end: number;
  readonly add: number;
}

/**
 * One update as a decision entry records it: a rate rule's index (one call), or a budget rule's index
 * and the micro-dollars it added. The key and window follow from the policy, the call and its time.
 */
export type CountedItem = number | readonly [number, number];

/** Counters as a decision reads them: what `key` counted in the window that starts at `start`. */
export interface CounterReader {
  counted(key: string, start: number): number;
}

export function counterKey(rule: string, per: Per, scope: string): string {
  return `${rule}\u0000${per}\u0000${scope}`;
}

/** The fixed window holding `unixS`: windows are aligned to multiples of `windowS` since the epoch. */
export function rateWindow(unixS: number, windowS: number): { start: number; end: number } {
  const start = Math.floor(unixS / windowS) * windowS;
  return { start, end: start + windowS };
}

const DAY = 86_400;

/** The UTC calendar period holding `unixS` (weeks start on Monday). */
export function budgetPeriod(unixS: number, period: Period): { start: number; end: number } {
  switch (period) {
    case "hour":
      return rateWindow(unixS, 3600);
    case "day":
      return rateWindow(unixS, DAY);
    case "week": {
      // 1970-01-01 was a Thursday: shift so windows begin on Mondays.
      const shifted = rateWindow(unixS + 3 * DAY, 7 * DAY);
      return { start: shifted.start - 3 * DAY, end: shifted.end - 3 * DAY };
    }
    case "month": {
      const d = new Date(Math.floor(unixS) * 1000);
      const start = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1) / 1000;
      const end = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1) / 1000;
      return { start, end };
    }
  }
}

/** What `key` has counted in the window starting at `start` (0 when its counter is for another window). */
export function counted(state: PolicyState | CounterReader, key: string, start: number): number {
  if (!("counters" in state)) return state.counted(key, start);
  const c = state.counters[key];
  return c !== undefined && c.start === start ? c.count : 0;
}

/**
 * The state after a decision: each update adds to its key's counter (a newer window starts from zero),
 * and counters whose window ended at or before the latest time applied so far are dropped, so the state
 * holds only live windows. An update for a window older than its key's, or already over by that latest
 * time (a clock behind another engine's), is not counted. So the state depends only on which updates
 * were applied, not on their order: engines that fold the same decisions in another order agree.
 */
export function applyCounterUpdates(
  state: PolicyState,
  updates: readonly CounterUpdate[],
  nowUnixS: number,
): PolicyState {
  const now = state.now === undefined || nowUnixS > state.now ? nowUnixS : state.now;
  // A loop over the keys, no entry arrays: the engine folds every allowed call through here.
  const next: Record<string, PolicyCounter> = {};
  const counters = state.counters;
  for (const key in counters) {
    const c = counters[key]!;
    if (c.end > now) next[key] = c;
  }
  for (const u of updates) {
    if (u.end <= now) continue;
    const c = next[u.key];
    if (c !== undefined && c.start > u.start) continue;
    const base = c !== undefined && c.start === u.start ? c.count : 0;
    next[u.key] = { start: u.start, end: u.end, count: base + u.add };
  }
  return { counters: next, now };
}
