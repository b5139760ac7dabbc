// The one error family @leash/chain throws: bad keys, bad key files and bad input to buildEntry.
// A chain that fails verification is a result (VerifyChainResult), never one of these errors.
import { LeashBaseError } from "@leash/core";

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
  | "invalid_argument";

/** Every error this package throws; `code` is stable and meant for programs, `message` for people. */
export class ChainError extends LeashBaseError<ChainErrorCode> {
  static override readonly marker: symbol = Symbol.for("leash.chain.error");
  static override readonly legacyCodes = { invalid_argument: "invalid_input" };
  override readonly name: string = "ChainError";
}

/** A key problem tied to a file; `path` names it so the message and a log can point at it. */
export class KeyFileError extends ChainError {
  static override readonly marker = Symbol.for("leash.chain.error.key_file");
  override readonly name = "KeyFileError";
  readonly path: string;

  constructor(code: ChainErrorCode, path: string, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.path = path;
  }
}
