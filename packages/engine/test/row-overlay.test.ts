// RowOverlay (src/row-overlay.ts) on its own: read-through order, shared reads, journaled updates and
// the write-back. How the projection uses it on real stores is test/projection.test.ts's.
import { describe, expect, it } from "vitest";
import { RowOverlay } from "../src/row-overlay.js";

type Row = { id: string; n: number; at_seq: number | null };

function overlay(committed = new Map<string, Row>(), store = new Map<string, Row>()) {
  const reads: string[] = [];
  const journal: Array<() => void> = [];
  const rows = new RowOverlay<Row>(
    committed,
    async (id) => {
      reads.push(id);
      await Promise.resolve();
      return store.get(id) ?? null;
    },
    (undo) => journal.push(undo),
  );
  return { rows, reads, journal };
}

describe("RowOverlay", () => {
  it("reads this transaction's rows, then the layers, then the committed map, then the store", async () => {
    const committed = new Map([["a", { id: "a", n: 1, at_seq: 0 }]]);
    const store = new Map([["b", { id: "b", n: 2, at_seq: 0 }]]);
    const { rows, reads } = overlay(committed, store);
    const layer = overlay().rows;
    layer.update("a", { id: "a", n: 10, at_seq: 0 });
    expect(await rows.get("a")).toEqual({ id: "a", n: 1, at_seq: 0 });
    rows.layerOver([layer]);
    expect(await rows.get("a")).toEqual({ id: "a", n: 1, at_seq: 0 }); // its own row comes first
    const fresh = overlay(committed, store).rows;
    fresh.layerOver([layer]);
    expect(await fresh.get("a")).toEqual({ id: "a", n: 10, at_seq: 0 });
    expect(await rows.get("b")).toEqual({ id: "b", n: 2, at_seq: 0 });
    expect(await rows.get("c")).toBeNull();
    expect(reads).toEqual(["b", "c"]);
  });

  it("shares one store read between calls that want the same row at once, and returns copies", async () => {
    const { rows, reads } = overlay(new Map(), new Map([["a", { id: "a", n: 1, at_seq: 0 }]]));
    const [x, y] = await Promise.all([rows.get("a"), rows.get("a")]);
    expect(reads).toEqual(["a"]);
    x!.n = 99;
    expect(y!.n).toBe(1);
    expect((await rows.get("a"))!.n).toBe(1);
  });

  it("keeps a row updated while its read was on its way", async () => {
    const { rows } = overlay(new Map(), new Map([["a", { id: "a", n: 1, at_seq: 0 }]]));
    const reading = rows.get("a");
    rows.update("a", { id: "a", n: 5, at_seq: 0 });
    expect((await reading)!.n).toBe(5);
    expect(rows.rows.get("a")!.n).toBe(5);
  });

  it("undoes an update (row and dirty flag) and writes back each changed row once, stamped", async () => {
    const { rows, journal } = overlay(new Map([["a", { id: "a", n: 1, at_seq: 0 }]]));
    await rows.get("a");
    rows.update("a", { id: "a", n: 2, at_seq: 0 });
    rows.update("b", { id: "b", n: 3, at_seq: null });
    journal.pop()!();
    expect(rows.rows.has("b")).toBe(false);
    journal.pop()!();
    expect(rows.rows.get("a")!.n).toBe(1);
    expect(rows.dirty).toBe(false);
    rows.update("a", { id: "a", n: 4, at_seq: 0 });
    rows.update("a", { id: "a", n: 5, at_seq: 0 });
    // The entry that names the row's digest stamps it (state-auth.ts RowStamps.take).
    rows.stamp("a", 7);
    expect(rows.writeBack()).toEqual([{ id: "a", n: 5, at_seq: 7 }]);
    expect(rows.rows.get("a")).toEqual({ id: "a", n: 5, at_seq: 7 });
    expect(rows.dirty).toBe(false);
    expect(rows.writeBack()).toEqual([]);
  });

  it("writes a row back again when an entry stamps it after a flush wrote it", async () => {
    const { rows } = overlay(new Map([["a", { id: "a", n: 1, at_seq: 0 }]]));
    rows.update("a", { id: "a", n: 2, at_seq: 0 });
    expect(rows.writeBack()).toEqual([{ id: "a", n: 2, at_seq: 0 }]);
    rows.stamp("a", 3);
    expect(rows.writeBack()).toEqual([{ id: "a", n: 2, at_seq: 3 }]);
    rows.stamp("a", 3);
    expect(rows.writeBack()).toEqual([]);
  });
});
