// The CLI's boundary with the outside world: the Io seam (streams, stdin, TTY flags), input reading and CliError.
// It knows nothing about commands or SHACKLE; commands take an Io so tests can run them in-process.
import { readFile } from "node:fs/promises";
import { parseJsonKeepingNumberText } from "@leash/core";

/** Where a command writes and what it reads; the real process in bin.ts, a capture in tests. */
export interface Io {
  stdout(text: string): void;
  stderr(text: string): void;
  /** The whole of standard input as UTF-8 text. */
  readStdin(): Promise<string>;
  /** Progress output is for humans watching a terminal, never for pipes or logs. */
  readonly stderrIsTTY: boolean;
  /** Colour (leash tail) is for a terminal: never for pipes, files or tests. */
  readonly stdoutIsTTY?: boolean;
  readonly stdinIsTTY: boolean;
  /** Environment variables (LEASH_STORE); tests pass their own so the caller's shell cannot leak in. */
  readonly env: Readonly<Record<string, string | undefined>>;
  /**
   * Calls `handler` once, at the first SIGINT or SIGTERM, for commands that run until told to stop;
   * returns a function that stops listening. A second signal then takes the default action (exit).
   */
  onStop(handler: (signal: string) => void): () => void;
}

/**
 * An error the user can act on: printed as one line on stderr, never with a stack.
 * `exitCode` follows the command's contract (2 for unreadable or invalid input).
 */
export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode: number, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CliError";
    this.exitCode = exitCode;
  }
}

/** Exit status for input the program cannot read or parse (files, JSON, envelopes, schemas, store URLs). */
export const EXIT_BAD_INPUT = 2;

/** Exit status for a request the engine refused: unknown session, nothing awaiting a human, a store error. */
export const EXIT_REFUSED = 1;

export function nodeIo(): Io {
  return {
    stdout: (text) => {
      process.stdout.write(text);
    },
    stderr: (text) => {
      process.stderr.write(text);
    },
    readStdin: async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString("utf8");
    },
    stderrIsTTY: process.stderr.isTTY === true,
    stdoutIsTTY: process.stdout.isTTY === true,
    stdinIsTTY: process.stdin.isTTY === true,
    env: process.env,
    onStop: (handler) => {
      const off = () => {
        process.off("SIGINT", listener);
        process.off("SIGTERM", listener);
      };
      const listener = (signal: NodeJS.Signals) => {
        off();
        handler(signal);
      };
      process.on("SIGINT", listener);
      process.on("SIGTERM", listener);
      return off;
    },
  };
}

/** The name a source has in messages: the path as given, or `<stdin>` for `-`. */
export function sourceLabel(source: string | undefined): string {
  return source === undefined || source === "-" ? "<stdin>" : source;
}

const FS_PROBLEMS: Record<string, string> = {
  ENOENT: "no such file",
  EACCES: "permission denied",
  EPERM: "permission denied",
  EISDIR: "is a directory",
  ENOTDIR: "a path component is not a directory",
  ELOOP: "too many symbolic links",
  ENAMETOOLONG: "file name too long",
};

/**
 * Reads a file, or stdin for `-` / no argument. Failures become a CliError that names
 * the file and the problem, so the user never sees an errno stack.
 */
export async function readSource(source: string | undefined, io: Io): Promise<string> {
  if (source === undefined || source === "-") {
    // A bare `leash hash` in a terminal would otherwise look hung.
    if (io.stdinIsTTY) io.stderr("leash: reading JSON from stdin (end with Ctrl-D)\n");
    try {
      return stripBom(await io.readStdin());
    } catch (err) {
      throw new CliError(`cannot read <stdin>: ${firstLine(err)}`, EXIT_BAD_INPUT, { cause: err });
    }
  }
  try {
    return stripBom(await readFile(source, "utf8"));
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    const problem = typeof code === "string" && FS_PROBLEMS[code] ? FS_PROBLEMS[code] : firstLine(err);
    throw new CliError(`cannot read ${source}: ${problem}`, EXIT_BAD_INPUT, { cause: err });
  }
}

/** JSON.parse with an error that names the source; the parsed value is plain JavaScript. */
export function parseJson(text: string, label: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new CliError(`${label}: invalid JSON: ${firstLine(err)}`, EXIT_BAD_INPUT, { cause: err });
  }
}

/**
 * Parses JSON that will be hashed (call params, or a document holding them): as parseJson, but a
 * number whose JavaScript value would hash differently from Python's reading of its text (`10.0`,
 * `1e16`, `-0.0`, big integers) stays a JsonNumberText, so digests and verdicts are the reference's.
 */
export function parseJsonKeepingText(text: string, label: string): unknown {
  // JSON.parse first: what is valid JSON, and the wording when it is not, stay exactly parseJson's.
  parseJson(text, label);
  try {
    return parseJsonKeepingNumberText(text);
  } catch (err) {
    throw new CliError(`${label}: invalid JSON: ${firstLine(err)}`, EXIT_BAD_INPUT, { cause: err });
  }
}

/** Editors on some platforms prepend a BOM, which JSON.parse rejects; it carries no data. */
function stripBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

/** Messages go on one line of stderr, whatever the underlying error put in them. */
export function firstLine(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.split(/\r?\n/, 1)[0]?.trim() || "unknown error";
}
