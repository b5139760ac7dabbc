// `leash verify`'s schema pass: each entry's data against its kind's JSON Schema (@leash/chain's
// checkEntryEvent), while the entries stream through verifyChain. It judges no hash or signature.
import { checkEntryEvent, type EventViolation, type VerifyChainResult } from "@leash/chain";
import type { ChainEntryRecord } from "@leash/core";

/** The first entry whose data its kind's schema refuses. */
export interface FoundViolation {
  readonly index: number;
  readonly seq: number;
  readonly violation: EventViolation;
}

/** Passes `entries` through, keeping the first schema violation in `found.first`. */
export async function* checkedEvents(
  entries: AsyncIterable<ChainEntryRecord>,
  found: { first: FoundViolation | null },
): AsyncGenerator<ChainEntryRecord> {
  let index = 0;
  for await (const entry of entries) {
    if (found.first === null) {
      const violation = checkEntryEvent(entry);
      if (violation !== null) found.first = { index, seq: entry.seq, violation };
    }
    index += 1;
    yield entry;
  }
}

/**
 * The violation to report in place of the chain's verdict: an entry whose signature verifies but
 * whose data breaks its schema, unless the chain broke at an earlier entry.
 */
export function violationFirst(
  result: VerifyChainResult,
  found: FoundViolation | null,
): FoundViolation | null {
  if (found === null) return null;
  if (!result.ok && result.failure.index <= found.index) return null;
  return found;
}

/** verify's FAILED line for a schema violation. */
export function violationLine({ index, seq, violation }: FoundViolation): string {
  const version = violation.version === null ? "" : ` v${violation.version}`;
  return `FAILED at entry ${index} (seq ${seq}): schema: ${violation.kind}${version} ${violation.pointer} ${violation.message}\n`;
}
