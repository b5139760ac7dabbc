// Where recovery keeps the last trusted checkpoint: a small JSON file, replaced atomically and fsynced.
// It judges nothing (verifyChain compares against the checkpoint) and stores nothing in the substrate.
import { randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { open, readFile, rename, unlink } from "node:fs/promises";
import { dirname } from "node:path";
import type { Checkpoint } from "@leash/chain";
import { RecoveryError } from "./errors.js";

/**
 * Keeps one checkpoint. It belongs somewhere the store's writers cannot reach (another disk, another
 * account): a checkpoint kept beside the chain can be rewritten along with it.
 */
export interface CheckpointStore {
  /** Where it lives, for messages (`leash verify --checkpoint <location>`). */
  readonly location: string;
  /** The stored checkpoint, or null when none was ever written. @throws RecoveryError "checkpoint_unreadable". */
  read(): Promise<Checkpoint | null>;
  /** Replaces the checkpoint; once it resolves, a crash leaves either the old or the new one, whole. */
  write(checkpoint: Checkpoint): Promise<void>;
}

const HASH = /^[0-9a-f]{64}$/;

/** The checkpoint in `text`, or why it is not one. Same shape as `leash verify --write-checkpoint`. */
export function parseCheckpoint(text: string): Checkpoint | string {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return "not JSON";
  }
  const v = value as Record<string, unknown> | null;
  if (typeof v !== "object" || v === null || Array.isArray(v)) return "not a JSON object";
  if (typeof v.count !== "number" || !Number.isSafeInteger(v.count) || v.count < 0) {
    return "count is not a natural number";
  }
  if (typeof v.head_hash !== "string" || !HASH.test(v.head_hash)) {
    return "head_hash is not 64 lowercase hex characters";
  }
  return { count: v.count, head_hash: v.head_hash };
}

/**
 * A checkpoint file at `path`, as `leash verify --checkpoint` reads it: `{"count":N,"head_hash":"…"}`.
 * Written to a temporary file in the same directory, fsynced, renamed over the old one, and the
 * directory fsynced, so a crash at any moment leaves a whole checkpoint (old or new), never half one.
 */
export function fileCheckpointStore(path: string): CheckpointStore {
  if (typeof path !== "string" || path === "") {
    throw new RecoveryError("invalid_argument", "fileCheckpointStore needs a file path");
  }
  return {
    location: path,

    async read() {
      let text: string;
      try {
        text = await readFile(path, "utf8");
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
        throw new RecoveryError(
          "checkpoint_unreadable",
          `cannot read checkpoint ${path}: ${(error as Error).message}`,
          { cause: error },
        );
      }
      const parsed = parseCheckpoint(text);
      if (typeof parsed === "string") {
        // Fail closed: an unreadable checkpoint is not "no checkpoint", or deleting a tail and then
        // scribbling on the checkpoint file would pass.
        throw new RecoveryError(
          "checkpoint_unreadable",
          `checkpoint ${path} is damaged (${parsed}); inspect it, and restore it from a backup or remove it to trust the chain as it is`,
        );
      }
      return parsed;
    },

    async write(checkpoint) {
      const text = `${JSON.stringify({ count: checkpoint.count, head_hash: checkpoint.head_hash })}\n`;
      if (typeof parseCheckpoint(text) === "string") {
        throw new RecoveryError(
          "invalid_argument",
          "a checkpoint is { count: natural number, head_hash: 64 hex }",
        );
      }
      const tmp = `${path}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
      try {
        const handle = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o644);
        try {
          await handle.writeFile(text, "utf8");
          await handle.sync();
        } finally {
          await handle.close();
        }
        await rename(tmp, path);
      } catch (error) {
        await unlink(tmp).catch(() => undefined);
        throw error;
      }
      // The rename is durable only once the directory entry is.
      const dir = await open(dirname(path), constants.O_RDONLY);
      try {
        await dir.sync();
      } finally {
        await dir.close();
      }
    },
  };
}
