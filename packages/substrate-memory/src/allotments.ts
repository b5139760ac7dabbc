// The memory substrate's escrow allotment rows (AllotmentStore): one overlay table keyed by account and shard.
// Rows only; the escrow arithmetic is @leash/budget-guard's. A deleted row is a null in the overlay.
import type { AllotmentStore, BudgetAllotment } from "@leash/core";
import { copyRecord } from "./copy.js";
import type { OverlayTable } from "./overlay.js";

const key = (accountId: string, shard: string) => `${accountId}\u0000${shard}`;
const byKey = (a: BudgetAllotment, b: BudgetAllotment) =>
  a.account_id < b.account_id
    ? -1
    : a.account_id > b.account_id
      ? 1
      : a.shard < b.shard
        ? -1
        : a.shard > b.shard
          ? 1
          : 0;

export function memoryAllotmentStore(
  table: OverlayTable<BudgetAllotment | null>,
  live: () => void,
): AllotmentStore {
  const rows = () => [...table.values()].filter((row): row is BudgetAllotment => row !== null).sort(byKey);
  return {
    get: async (accountId, shard) => {
      live();
      const row = table.get(key(accountId, shard));
      return row === undefined || row === null ? null : copyRecord(row);
    },
    list: async (accountId) => {
      live();
      return rows()
        .filter((row) => row.account_id === accountId)
        .map((row) => copyRecord(row));
    },
    listAll: async () => {
      live();
      return rows().map((row) => copyRecord(row));
    },
    put: async (allotment) => {
      live();
      table.set(key(allotment.account_id, allotment.shard), copyRecord(allotment));
    },
    delete: async (accountId, shard) => {
      live();
      if (table.has(key(accountId, shard))) table.set(key(accountId, shard), null);
    },
  };
}
