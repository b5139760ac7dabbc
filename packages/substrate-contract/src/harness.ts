// Per-test plumbing for the contract suite: a fresh location, tracked handles, cleanup, error assertions.
// It asserts nothing about a substrate by itself; the contract modules do.

import { type Substrate, SubstrateError, type SubstrateErrorCode } from "@leash/core";
import { expect, onTestFinished } from "vitest";
import type { SubstrateContractOptions } from "./options.js";

export interface ContractHarness {
  readonly location: string;
  /** A new, unmigrated handle on the test's location; closed after the test unless closed through `close`. */
  open(): Promise<Substrate>;
  /** `open()` followed by `migrate()`. */
  openMigrated(): Promise<Substrate>;
  /** Closes a handle opened here (once), so the end-of-test cleanup does not close it again. */
  close(substrate: Substrate): Promise<void>;
}

/**
 * Call at the start of a test: takes a fresh location and registers cleanup that closes every handle the
 * test left open, then disposes of the location, even when the test fails.
 */
export async function useHarness(opts: SubstrateContractOptions): Promise<ContractHarness> {
  const location = await opts.freshLocation();
  const open = new Set<Substrate>();
  onTestFinished(async () => {
    const failures: unknown[] = [];
    for (const substrate of open) {
      try {
        await substrate.close();
      } catch (error) {
        failures.push(error);
      }
    }
    open.clear();
    if (opts.dispose !== undefined) await opts.dispose(location);
    if (failures.length > 0) throw failures[0];
  });
  const harness: ContractHarness = {
    location,
    async open() {
      const substrate = await opts.open(location);
      open.add(substrate);
      return substrate;
    },
    async openMigrated() {
      const substrate = await harness.open();
      await substrate.migrate();
      return substrate;
    },
    async close(substrate) {
      if (!open.delete(substrate)) return;
      await substrate.close();
    },
  };
  return harness;
}

/** Two migrated handles on one location, for the tests that race them or read one's commits from the other. */
export async function twoHandles(harness: ContractHarness): Promise<[Substrate, Substrate]> {
  const a = await harness.openMigrated();
  const b = await harness.openMigrated();
  return [a, b];
}

/**
 * Awaits `promise` and asserts it rejects with a SubstrateError carrying `code`; returns the error.
 * Uses the Symbol.for marker, so an error from another copy of @leash/core still counts.
 */
export async function expectSubstrateError(
  promise: Promise<unknown>,
  code: SubstrateErrorCode,
): Promise<SubstrateError> {
  const outcome = await promise.then(
    (value) => ({ rejected: false as const, value }),
    (error: unknown) => ({ rejected: true as const, error }),
  );
  if (!outcome.rejected) {
    expect.fail(
      `expected a SubstrateError with code "${code}", but it resolved with ${String(outcome.value)}`,
    );
  }
  const { error } = outcome;
  expect(SubstrateError.isInstance(error), `expected a SubstrateError, got ${String(error)}`).toBe(true);
  expect((error as SubstrateError).code).toBe(code);
  return error as SubstrateError;
}

/**
 * Yields inside a transaction between a read and the write that depends on it, so an implementation that
 * does not serialize (or lock the row it read) gets the chance to lose an update. In-process stores only
 * need a macrotask; multi-process stores get a millisecond so other connections really run meanwhile.
 */
export function raceWindow(substrate: Substrate): Promise<void> {
  return substrate.capabilities.multiProcess
    ? new Promise((resolve) => setTimeout(resolve, 1))
    : new Promise((resolve) => setImmediate(resolve));
}

/** Generous per-test timeout for the tests that run many committing transactions (fsync each on durable stores). */
export const CONCURRENCY_TIMEOUT_MS = 20_000;

/** Sorts copies by a string key: list order is unspecified by the port except for `listExpired`. */
export function byKey<T>(rows: readonly T[], key: (row: T) => string): T[] {
  return [...rows].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}
