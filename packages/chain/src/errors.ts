// The one error family @leash/chain throws: bad keys, bad key files and bad input to buildEntry.
// A chain that fails verification is a result (VerifyChainResult), never one of these errors.

export type ChainErrorCode =
  /** No key where one was expected: the file does not exist, or no file and no LEASH_SIGNING_KEY. */
  | "key_not_found"
  /** The key file exists but could not be read (permissions, a directory, an I/O error). */
  | "key_unreadable"
  /** The key parsed, but is not what was asked for: not Ed25519, or public where private is needed. */
  | "key_wrong_type"
  /** The text is not a key in any accepted encoding (PEM, base64 PKCS#8, 64 hex characters). */
  | "key_invalid"
  /** A private key file that group or others may read; the fix is `chmod 600`. */
  | "key_permissions"
  /** writeKeyFiles would overwrite an existing file and was not told it may. */
  | "key_exists"
  /** An argument of buildEntry/appendEntry/verifyChain/exporters is malformed. */
  | "invalid_input";

// Symbol.for, not a module-local Symbol: two copies of this package in one process (a bundling
// accident, a dual install) must still recognise each other's errors.
const MARKER = Symbol.for("leash.chain.error");

/** Every error @leash/chain throws; `code` is stable and meant for programs, `message` for people. */
export class ChainError extends Error {
  readonly [MARKER] = true;
  override readonly name: string = "ChainError";
  readonly code: ChainErrorCode;

  constructor(code: ChainErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }

  static isInstance(error: unknown): error is ChainError {
    return typeof error === "object" && error !== null && (error as Record<symbol, unknown>)[MARKER] === true;
  }
}

const KEY_FILE_MARKER = Symbol.for("leash.chain.error.key_file");

/** A key problem tied to a file; `path` names it so the message and a log can point at it. */
export class KeyFileError extends ChainError {
  readonly [KEY_FILE_MARKER] = true;
  override readonly name = "KeyFileError";
  readonly path: string;

  constructor(code: ChainErrorCode, path: string, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.path = path;
  }

  static override isInstance(error: unknown): error is KeyFileError {
    return (
      typeof error === "object" &&
      error !== null &&
      (error as Record<symbol, unknown>)[KEY_FILE_MARKER] === true
    );
  }
}
