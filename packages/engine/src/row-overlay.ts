// One kind of row (sessions, budget accounts) as one projection transaction sees it: read through once,
// changed in memory with an undo, handed back stamped for the batch write. Not the projection; writes nothing.
//
// Why one class: sessions and accounts are cached, layered, journaled and written back the same way;
// only where a miss is read from differs. The transaction (projection.ts) owns the journal, decides
// when to write back and what the projection keeps after COMMIT.

type Undo = () => void;

export class RowOverlay<R extends { at_seq: number | null }> {
  /** Rows as this transaction knows them (read or written), to become the projection at COMMIT. */
  readonly #rows = new Map<string, R>();
  /** Rows changed since the last write-back. */
  readonly #dirty = new Set<string>();
  /** Store reads on their way, so calls that want one row at once share a single read. */
  readonly #reading = new Map<string, Promise<R | null>>();
  /** Pending transactions' overlays (newest first) whose rows read as the store's (Projection.pending). */
  #layers: readonly RowOverlay<R>[] = [];
  /** Ids read from the store once in this transaction, never from the projection or pending layers. */
  fresh: ReadonlySet<string> | undefined = undefined;

  /**
   * @param committed the projection's rows, as of the head it holds (read, never written, here)
   * @param load reads a row the caches lack from the store, in this transaction
   * @param journal records an undo on the transaction's journal (ProjectionTx.rollbackTo)
   * @param changed told of every row changed (the next chain entry names it: state-auth.ts)
   */
  constructor(
    private readonly committed: ReadonlyMap<string, R>,
    private readonly load: (id: string) => Promise<R | null>,
    private readonly journal: (undo: Undo) => void,
    private readonly changed: (id: string) => void = () => {},
  ) {}

  get rows(): ReadonlyMap<string, R> {
    return this.#rows;
  }

  /** Whether any row changed since the last write-back. */
  get dirty(): boolean {
    return this.#dirty.size > 0;
  }

  /** Reads through `layers` (newest first) before the projection's rows from now on. */
  layerOver(layers: readonly RowOverlay<R>[]): void {
    this.#layers = layers;
  }

  /** The row (a copy) when memory holds it, without reading the store; otherwise undefined. */
  peek(id: string): R | undefined {
    const row =
      this.#rows.get(id) ?? (this.fresh?.has(id) ? undefined : (this.#layered(id) ?? this.committed.get(id)));
    if (row === undefined) return undefined;
    this.#rows.set(id, row);
    return { ...row };
  }

  /** The row (a copy: callers change what they get) or null when the store has none. */
  async get(id: string): Promise<R | null> {
    const held = this.peek(id);
    if (held !== undefined) return held;
    // Calls of a batch read shared rows (an agent's or organization's account) at once: one read serves them.
    let reading = this.#reading.get(id);
    if (reading === undefined) {
      reading = this.load(id)
        .then((read) => {
          // A row written while the read was on its way is newer than what the read found.
          if (read !== null && !this.#rows.has(id)) this.#rows.set(id, read);
          return read;
        })
        .finally(() => this.#reading.delete(id));
      this.#reading.set(id, reading);
    }
    const read = await reading;
    return read === null ? null : { ...(this.#rows.get(id) ?? read) };
  }

  /** A row the store already holds as given (an insert that reached it): known, nothing to write back. */
  known(id: string, row: R): void {
    this.#rows.set(id, { ...row });
  }

  /** Changes a row in memory, to be written back; the journal's undo restores the row and its dirty flag. */
  update(id: string, row: R): void {
    const before = this.#rows.get(id);
    const wasDirty = this.#dirty.has(id);
    this.journal(() => {
      if (before === undefined) this.#rows.delete(id);
      else this.#rows.set(id, before);
      if (!wasDirty) this.#dirty.delete(id);
    });
    this.#rows.set(id, { ...row });
    this.#dirty.add(id);
    this.changed(id);
  }

  /** The row as this transaction holds it (not a copy: read, never change it), or undefined. */
  current(id: string): R | undefined {
    return this.#rows.get(id);
  }

  /**
   * Moves a row's stamp to `seq`, the entry that names its digest (RowStamps.take), to be written
   * back (again, if a flush wrote it since its change). Not journaled: an undo of the change before
   * it puts back the whole row, and writing back an unchanged row changes nothing.
   */
  stamp(id: string, seq: number): void {
    const row = this.#rows.get(id);
    if (row === undefined || row.at_seq === seq) return;
    this.#rows.set(id, { ...row, at_seq: seq });
    this.#dirty.add(id);
  }

  /**
   * Returns copies of every row changed since the last write-back, each with the stamp of the entry
   * that last named it; they are clean afterwards.
   */
  writeBack(): R[] {
    const out: R[] = [];
    for (const id of this.#dirty) out.push({ ...this.#rows.get(id)! });
    this.#dirty.clear();
    return out;
  }

  #layered(id: string): R | undefined {
    for (const layer of this.#layers) {
      const row = layer.#rows.get(id);
      if (row !== undefined) return row;
    }
    return undefined;
  }
}
