// The snapshot check's digest pass: each state row against the digest the entry that stamped it signed
// (`row_digests`, docs/chain-format.md), and the digests a repair entry signs for the rows it rewrites.
// It reads the entries the stamps name (the chain verified before); it rewrites nothing.
import { parseEntryBody, rowDigest, rowDigestsOf, rowKey, type StateTable } from "@leash/chain";
import type { SubstrateTx } from "@leash/core";

/** A row as stored, with the stamp naming the entry that last wrote it. */
export interface StampedRow {
  table: StateTable;
  id: string;
  row: { at_seq?: number | null };
}

/** A row whose digest is not the one its stamping entry signed: stored and signed digests (null: none). */
export interface DigestMismatch {
  table: StateTable;
  id: string;
  stored: string;
  signed: string | null;
}

/**
 * The rows whose digest differs from the one their stamping entry names. Rows without a stamp, or
 * stamped by an entry written before row digests (no `row_digests`), are not checked: the engine
 * serves them as before (docs/substrates.md). A stamp beyond the chain is the at_seq check's.
 */
export async function digestMismatches(
  tx: SubstrateTx,
  rows: readonly StampedRow[],
): Promise<DigestMismatch[]> {
  const signedAt = new Map<number, Readonly<Record<string, string>> | null>();
  const out: DigestMismatch[] = [];
  for (const { table, id, row } of rows) {
    const seq = row.at_seq;
    if (seq === null || seq === undefined) continue;
    let digests = signedAt.get(seq);
    if (digests === undefined) {
      const [entry] = await tx.chain.range(seq, 1);
      const body = entry === undefined || entry.seq !== seq ? null : parseEntryBody(entry.body);
      digests = body === null || typeof body === "string" ? null : (rowDigestsOf(body.data) ?? null);
      signedAt.set(seq, digests);
    }
    if (digests === null) continue;
    const stored = rowDigest(table, row);
    const signed = digests[rowKey(table, id)] ?? null;
    if (stored !== signed) out.push({ table, id, stored, signed });
  }
  return out;
}

/** The `row_digests` a repair entry signs: each rewritten row, as written (stamped with that entry). */
export function repairDigests(rows: readonly StampedRow[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const { table, id, row } of rows) out[rowKey(table, id)] = rowDigest(table, row);
  return out;
}
