// Parses `sqlite:` store URLs (`--store sqlite:./leash.db`) into substrate options.
// It opens nothing and never touches the file system; `openSqliteSubstrate` does.
import type { SqliteSubstrateOptions } from "./options.js";

const SCHEME = "sqlite:";

function invalid(url: string, why: string): TypeError {
  return new TypeError(`Invalid SQLite store URL ${JSON.stringify(url)}: ${why}`);
}

function parseFlag(url: string, name: string, value: string): boolean {
  const v = value.toLowerCase();
  if (v === "on" || v === "true" || v === "1") return true;
  if (v === "off" || v === "false" || v === "0") return false;
  throw invalid(url, `${name} must be on or off, not ${JSON.stringify(value)}`);
}

/**
 * Reads a SQLite store URL:
 * - `sqlite:./leash.db`, `sqlite:leash.db` — a path relative to the working directory;
 * - `sqlite:/var/lib/leash.db` or `sqlite:///var/lib/leash.db` — an absolute path (the second is
 *   the `file:` URL form: an empty or `localhost` authority);
 * - query parameters `busy_timeout` (ms), `synchronous` (`FULL` | `NORMAL`), `group_commit` (`on` | `off`),
 *   `mmap_size` (bytes; 0 turns memory-mapped reads off), `background_checkpoints` (`on` | `off`),
 *   `checkpoint_restart_frames` (WAL frames).
 *
 * The path is percent-decoded (write `%25` for a literal `%`). In-memory databases are refused: this
 * substrate promises durability and multi-process sharing, which `:memory:` has neither of.
 */
export function parseSqliteUrl(url: string): SqliteSubstrateOptions {
  if (url.slice(0, SCHEME.length).toLowerCase() !== SCHEME)
    throw invalid(url, `expected the ${SCHEME} scheme`);
  let rest = url.slice(SCHEME.length);
  if (rest.includes("#")) throw invalid(url, "fragments are not supported (write %23 for a literal #)");
  const queryAt = rest.indexOf("?");
  const query = queryAt < 0 ? "" : rest.slice(queryAt + 1);
  if (queryAt >= 0) rest = rest.slice(0, queryAt);

  if (rest.startsWith("//")) {
    const slashAt = rest.indexOf("/", 2);
    const host = slashAt < 0 ? rest.slice(2) : rest.slice(2, slashAt);
    if (host !== "" && host.toLowerCase() !== "localhost") {
      // `sqlite://data/leash.db` could mean a host or a relative path; refuse rather than guess.
      throw invalid(
        url,
        `a SQLite store is a local file, not a host (${JSON.stringify(host)}); write sqlite:./relative.db or sqlite:///absolute/path.db`,
      );
    }
    rest = slashAt < 0 ? "" : rest.slice(slashAt);
  }

  let path: string;
  try {
    path = decodeURIComponent(rest);
  } catch (error) {
    throw invalid(url, `bad percent-encoding in the path (${(error as Error).message})`);
  }
  if (path === "") throw invalid(url, "the path is empty");
  if (path === ":memory:" || path.startsWith("file::memory:")) {
    throw invalid(url, "in-memory databases are not durable; use @leash/substrate-memory instead");
  }

  const options: SqliteSubstrateOptions = { path };
  for (const [name, value] of new URLSearchParams(query)) {
    switch (name) {
      case "busy_timeout":
      case "busy_timeout_ms": {
        if (!/^\d+$/.test(value)) throw invalid(url, `${name} must be a whole number of milliseconds`);
        options.busyTimeoutMs = Number(value);
        break;
      }
      case "synchronous": {
        const mode = value.toUpperCase();
        if (mode !== "FULL" && mode !== "NORMAL") throw invalid(url, "synchronous must be FULL or NORMAL");
        options.synchronous = mode;
        break;
      }
      case "mmap_size": {
        if (!/^\d+$/.test(value)) throw invalid(url, "mmap_size must be a whole number of bytes");
        options.mmapSizeBytes = Number(value);
        break;
      }
      case "background_checkpoints":
        options.backgroundCheckpoints = parseFlag(url, name, value);
        break;
      case "checkpoint_restart_frames": {
        if (!/^[1-9]\d*$/.test(value))
          throw invalid(url, `${name} must be a whole number of frames, at least 1`);
        options.checkpointRestartFrames = Number(value);
        break;
      }
      case "group_commit":
        options.groupCommit = parseFlag(url, name, value) ? {} : false;
        break;
      default:
        throw invalid(url, `unknown parameter ${JSON.stringify(name)}`);
    }
  }
  return options;
}
