// The NDJSON file sink: one line per entry, fsynced before the relay acks, duplicates skipped by entry_id.
// One writer per file: two processes appending to the same file would each miss the other's entry ids.

import { constants } from "node:fs";
import { type FileHandle, open } from "node:fs/promises";
import { dirname } from "node:path";
import type { ChainEntryRecord } from "@leash/core";
import { describeError, RelayError } from "../errors.js";
import { entryLine, parseEntryLine } from "../ndjson.js";
import { DELIVERED, type DeliveryResult, retryable, SINK_SPECIFICATION_VERSION, type Sink } from "../sink.js";

export interface FileSinkOptions {
  /** The NDJSON file; created when missing, appended to otherwise. */
  path: string;
  /**
   * fsync (fdatasync) each batch before reporting it delivered (default true). Off, a power loss can
   * drop lines the relay has already acknowledged: they would never be sent again.
   */
  fsync?: boolean;
  name?: string;
}

const NEWLINE = 0x0a;
const READ_CHUNK = 1 << 20;

interface Scan {
  ids: Set<string>;
  /** Bytes of complete lines; anything after is a torn line, cut off. */
  size: number;
  /** Bytes of torn line removed by this scan. */
  truncated: number;
}

/**
 * Reads every complete line's entry_id, and cuts off a trailing line without its newline: a crash
 * in the middle of an append leaves one, and the entries in it were never acknowledged, so the relay
 * will send them again. A bad line before the end is not a torn write and is refused, not dropped.
 */
async function scan(handle: FileHandle, path: string, fsync: boolean): Promise<Scan> {
  const ids = new Set<string>();
  const { size: fileSize } = await handle.stat();
  const buffer = Buffer.allocUnsafe(READ_CHUNK);
  let carry: Buffer = Buffer.alloc(0);
  let position = 0;
  let complete = 0;
  let lineNumber = 0;
  while (position < fileSize) {
    const { bytesRead } = await handle.read(buffer, 0, Math.min(READ_CHUNK, fileSize - position), position);
    if (bytesRead === 0) break;
    position += bytesRead;
    const chunk =
      carry.length === 0
        ? buffer.subarray(0, bytesRead)
        : Buffer.concat([carry, buffer.subarray(0, bytesRead)]);
    let start = 0;
    for (let nl = chunk.indexOf(NEWLINE, start); nl !== -1; nl = chunk.indexOf(NEWLINE, start)) {
      lineNumber++;
      const text = chunk.toString("utf8", start, nl);
      if (text.trim() !== "") {
        try {
          ids.add(parseEntryLine(text).entry_id);
        } catch (error) {
          throw new RelayError(
            "corrupt",
            `${path}:${lineNumber} is not an entry line; fix or move the file`,
            {
              cause: error,
            },
          );
        }
      }
      complete += nl + 1 - start;
      start = nl + 1;
    }
    // Copied: the read buffer is reused by the next read.
    carry = Buffer.from(chunk.subarray(start));
  }
  const truncated = fileSize - complete;
  if (truncated > 0) await handle.truncate(complete);
  // Lines a failed write left behind were never synced: sync them now, before they count as delivered.
  if (fsync) await handle.datasync();
  return { ids, size: complete, truncated };
}

async function syncDirectory(path: string): Promise<void> {
  // A new file's directory entry is only durable once the directory itself is synced.
  const dir = await open(dirname(path), constants.O_RDONLY);
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}

async function writeAll(handle: FileHandle, data: Buffer): Promise<void> {
  let offset = 0;
  while (offset < data.length) {
    // O_APPEND: every write lands at the end, whatever the position argument says.
    const { bytesWritten } = await handle.write(data, offset, data.length - offset);
    offset += bytesWritten;
  }
}

export class FileSink implements Sink {
  readonly specificationVersion = SINK_SPECIFICATION_VERSION;
  readonly name: string;
  readonly path: string;
  readonly #fsync: boolean;
  #handle: FileHandle | null = null;
  #ids = new Set<string>();
  #size = 0;
  #truncatedBytes = 0;
  // Deliveries one at a time: two batches interleaving their writes would tear each other's lines.
  #tail: Promise<unknown> = Promise.resolve();
  #closed = false;

  constructor(options: FileSinkOptions) {
    if (typeof options.path !== "string" || options.path === "") {
      throw new RelayError("invalid_argument", "the file sink needs a path");
    }
    this.path = options.path;
    this.#fsync = options.fsync ?? true;
    this.name = options.name ?? `file:${options.path}`;
  }

  /** Entry ids in the file, and bytes of torn line cut off since the sink was opened. */
  get stats(): { entries: number; bytes: number; truncatedBytes: number } {
    return { entries: this.#ids.size, bytes: this.#size, truncatedBytes: this.#truncatedBytes };
  }

  /** Opens the file and reads the entry ids it holds; a no-op when open. openFileSink calls it. */
  open(): Promise<void> {
    const run = this.#tail.then(() => this.#open());
    this.#tail = run.catch(() => undefined);
    return run;
  }

  /** Opens (or reopens, after a failed write) the file and rebuilds the entry ids from what it holds. */
  async #open(): Promise<void> {
    if (this.#handle !== null) return;
    // Append-only writes, reads anywhere (the scan); O_EXCL first, to know whether the directory needs a sync.
    let created = false;
    let handle: FileHandle;
    try {
      handle = await open(
        this.path,
        constants.O_RDWR | constants.O_APPEND | constants.O_CREAT | constants.O_EXCL,
        0o640,
      );
      created = true;
    } catch (error) {
      if ((error as { code?: unknown }).code !== "EEXIST") throw error;
      handle = await open(this.path, "a+");
    }
    try {
      if (created && this.#fsync) await syncDirectory(this.path);
      const found = await scan(handle, this.path, this.#fsync);
      this.#ids = found.ids;
      this.#size = found.size;
      this.#truncatedBytes += found.truncated;
      this.#handle = handle;
    } catch (error) {
      await handle.close().catch(() => undefined);
      throw error;
    }
  }

  deliver(batch: readonly ChainEntryRecord[]): Promise<DeliveryResult> {
    const run = this.#tail.then(() => this.#deliver(batch));
    this.#tail = run.catch(() => undefined);
    return run;
  }

  async #deliver(batch: readonly ChainEntryRecord[]): Promise<DeliveryResult> {
    if (this.#closed) return { outcomes: batch.map(() => retryable(`${this.name} is closed`)) };
    try {
      await this.#open();
    } catch (error) {
      if (RelayError.isInstance(error)) throw error;
      return { outcomes: batch.map(() => retryable(`cannot open ${this.path}: ${describeError(error)}`)) };
    }
    const fresh = new Set<string>();
    let text = "";
    for (const entry of batch) {
      if (this.#ids.has(entry.entry_id) || fresh.has(entry.entry_id)) continue;
      fresh.add(entry.entry_id);
      text += entryLine(entry);
    }
    if (fresh.size > 0) {
      const data = Buffer.from(text, "utf8");
      try {
        await writeAll(this.#handle!, data);
        if (this.#fsync) await this.#handle!.datasync();
      } catch (error) {
        // The file may now end in part of this batch: reopen, rescan and sync before the next write,
        // so lines that did land count as delivered then and the torn rest is cut off. (A kernel that
        // drops pages after a failed fsync yet still serves them from its cache defeats this; nothing
        // short of direct I/O does better.)
        const handle = this.#handle;
        this.#handle = null;
        await handle?.close().catch(() => undefined);
        return {
          outcomes: batch.map((entry) =>
            fresh.has(entry.entry_id)
              ? retryable(`write to ${this.path} failed: ${describeError(error)}`)
              : DELIVERED,
          ),
        };
      }
      this.#size += data.length;
      for (const id of fresh) this.#ids.add(id);
    }
    return { outcomes: batch.map(() => DELIVERED) };
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#tail;
    const handle = this.#handle;
    this.#handle = null;
    await handle?.close();
  }
}

/**
 * Opens an NDJSON file sink: reads the entry ids already in the file (so redelivered entries are
 * skipped) and cuts off a torn last line. Memory grows with the file: about 100 bytes per entry id.
 * @throws RelayError "corrupt" when a line before the last is not an entry.
 */
export async function openFileSink(options: FileSinkOptions): Promise<FileSink> {
  const sink = new FileSink(options);
  await sink.open();
  return sink;
}
