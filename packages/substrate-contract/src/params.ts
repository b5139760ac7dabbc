// Contract tests for params stored by digest (ChainEntryRecord.params, ChainStore.params): kept once per digest,
// in the entry's transaction, seen by it, gone with its rollback, never returned by range. Digests are not checked.

import { createHash } from "node:crypto";
import type { ChainEntryRecord } from "@leash/core";
import { describe, expect, it } from "vitest";
import { makeChain } from "./fixtures.js";
import { twoHandles, useHarness } from "./harness.js";
import type { SubstrateContractOptions } from "./options.js";

const digest = (text: string) => createHash("sha256").update(text).digest("hex");
/** Large enough to leave a row's page, with text a trimming or recoding driver would change. */
const BIG = `{"blob":"${"ü€😀 \\u2028".repeat(20_000)}"}`;
const SMALL = '{"q":"leash"}';

const withParams = (entry: ChainEntryRecord, text: string): ChainEntryRecord => ({
  ...entry,
  params: { hash: digest(text), text },
});

export function paramsStoreContract(opts: SubstrateContractOptions): void {
  describe("params by digest", () => {
    it("keeps each digest's text once, the first one, and answers only the digests it has", async () => {
      const sub = await (await useHarness(opts)).openMigrated();
      const chain = makeChain(4);
      await sub.transaction(async (tx) => {
        await tx.chain.append(withParams(chain[0]!, BIG));
        await tx.chain.append(withParams(chain[1]!, BIG));
        // Seen inside the transaction that appended it.
        expect((await tx.chain.params([digest(BIG)])).get(digest(BIG))).toBe(BIG);
      });
      await sub.transaction(async (tx) => {
        await tx.chain.append(withParams(chain[2]!, SMALL));
        // A second text under a digest already stored (a store never checks digests) is not kept.
        await tx.chain.append({ ...chain[3]!, params: { hash: digest(BIG), text: "{}" } });
      });
      const found = await sub.transaction((tx) =>
        tx.chain.params([digest(BIG), digest(SMALL), digest("absent"), digest(BIG)]),
      );
      expect([...found.entries()].sort()).toEqual(
        [
          [digest(BIG), BIG],
          [digest(SMALL), SMALL],
        ].sort(),
      );
      expect(await sub.transaction((tx) => tx.chain.params([]))).toEqual(new Map());
      // range gives the entries back as they were appended without their params.
      const back = await sub.transaction((tx) => tx.chain.range(0, 10));
      expect(back).toEqual(chain);
    });

    it("keeps params written with writeBatch, and drops them with a rolled-back transaction", async () => {
      const harness = await useHarness(opts);
      const [a, b] = await twoHandles(harness);
      const chain = makeChain(2);
      const failure = new Error("rolled back");
      await expect(
        a.transaction(async (tx) => {
          await tx.chain.append(withParams(chain[0]!, BIG));
          throw failure;
        }),
      ).rejects.toBe(failure);
      expect(await b.transaction((tx) => tx.chain.params([digest(BIG)]))).toEqual(new Map());
      await a.transaction((tx) =>
        tx.writeBatch({
          entries: [withParams(chain[0]!, BIG), withParams(chain[1]!, SMALL)],
          outbox: [],
          reservations: [],
          sessions: [],
          accounts: [],
        }),
      );
      const found = await b.transaction((tx) => tx.chain.params([digest(BIG), digest(SMALL)]));
      expect(found.get(digest(BIG))).toBe(BIG);
      expect(found.get(digest(SMALL))).toBe(SMALL);
    });
  });
}
