// Signing and verification keys for the CLI: --key-file / LEASH_SIGNING_KEY / --ephemeral-key, and --pubkey.
// Key formats and file safety are @leash/chain's; this turns its errors into one-line CliErrors with a way out.

import { statSync } from "node:fs";
import {
  ChainError,
  generateKeyPair,
  loadPublicKey,
  loadSigningKey,
  type PublicKeyInfo,
  SIGNING_KEY_ENV,
  type Signer,
} from "@leash/chain";
import type { Command } from "commander";
import { CliError, EXIT_BAD_INPUT, firstLine, type Io } from "./io.js";

export interface KeyOptions {
  readonly keyFile?: string;
  readonly ephemeralKey?: boolean;
}

/** Where the signer came from; `bench engine` hands the same key to its worker processes. */
export type SignerSource =
  | { readonly kind: "file"; readonly path: string }
  | { readonly kind: "env"; readonly text: string }
  | { readonly kind: "ephemeral"; readonly privateKeyPem: string };

export interface ResolvedSigner {
  readonly signer: Signer;
  readonly source: SignerSource;
}

const MAKE_ONE = "make one with `leash keygen --out PATH`";

/** The hint every "no key" error carries. */
export const NO_KEY_MESSAGE = `no signing key: pass --key-file PATH or set ${SIGNING_KEY_ENV} (${MAKE_ONE})`;

export function addKeyOptions(command: Command): Command {
  return command
    .option(
      "--key-file <path>",
      `Ed25519 private key (PKCS#8 PEM, mode 0600) that signs the audit chain (default: $${SIGNING_KEY_ENV}); ${MAKE_ONE}`,
    )
    .option(
      "--ephemeral-key",
      "sign with a fresh throwaway key (its public key is printed once; the chain it signs cannot be verified without it)",
    );
}

/** A ChainError about a key as a one-line, exit-2 CliError; anything else passes through unchanged. */
export function keyFailure(err: unknown, what: string, { privateKey = false } = {}): unknown {
  if (!ChainError.isInstance(err)) return err;
  const hint = err.code === "key_not_found" && privateKey ? ` (${MAKE_ONE})` : "";
  return new CliError(`${what}: ${firstLine(err)}${hint}`, EXIT_BAD_INPUT, { cause: err });
}

/**
 * Refuses a key path that exists but is not a regular file, before anything opens it: opening a
 * FIFO blocks until some writer comes, which would hang the command forever. A missing path is
 * left to the loader, whose error says how to make a key.
 */
export function checkKeyFileType(path: string, what: string): void {
  let kind: string;
  try {
    const info = statSync(path, { throwIfNoEntry: false });
    if (info === undefined || info.isFile()) return;
    if (info.isFIFO()) kind = "a FIFO";
    else if (info.isDirectory()) kind = "a directory";
    else if (info.isSocket()) kind = "a socket";
    else if (info.isCharacterDevice() || info.isBlockDevice()) kind = "a device";
    else kind = "a special file";
  } catch {
    return; // unreadable metadata (EACCES, ELOOP…): the loader reports it in its own words
  }
  throw new CliError(`${what}: ${path} is ${kind}, not a regular file`, EXIT_BAD_INPUT);
}

/**
 * The signer a command that writes the chain uses: --key-file, else LEASH_SIGNING_KEY, else (only with
 * --ephemeral-key) a fresh key announced on stderr. Without any of them the command refuses to start.
 */
export function resolveSigner(
  options: KeyOptions,
  io: Io,
  { ephemeral = true }: { ephemeral?: boolean } = {},
): ResolvedSigner {
  if (options.keyFile !== undefined && options.ephemeralKey === true) {
    throw new CliError("give --key-file or --ephemeral-key, not both", EXIT_BAD_INPUT);
  }
  if (options.ephemeralKey === true) {
    // An explicit flag beats the ambient environment, as --store beats LEASH_STORE.
    const pair = generateKeyPair();
    io.stderr(
      `leash: warning: --ephemeral-key: signing with throwaway key ${pair.keyId}, which is lost when this process exits; the chain it signs cannot be verified afterwards unless you keep its public key ${pair.publicKeyHex}\n`,
    );
    return { signer: pair.signer, source: { kind: "ephemeral", privateKeyPem: pair.privateKeyPem } };
  }
  if (options.keyFile !== undefined) {
    checkKeyFileType(options.keyFile, "signing key");
    try {
      return {
        signer: loadSigningKey({ file: options.keyFile }),
        source: { kind: "file", path: options.keyFile },
      };
    } catch (err) {
      throw keyFailure(err, "signing key", { privateKey: true });
    }
  }
  const text = io.env[SIGNING_KEY_ENV];
  if (text === undefined || text.trim() === "") {
    const throwaway = ephemeral ? ", or --ephemeral-key for a throwaway key" : "";
    throw new CliError(`${NO_KEY_MESSAGE}${throwaway}`, EXIT_BAD_INPUT);
  }
  try {
    return { signer: loadSigningKey({ env: io.env }), source: { kind: "env", text } };
  } catch (err) {
    throw keyFailure(err, "signing key", { privateKey: true });
  }
}

/** A private key file named by a flag other than --key-file (`key rotate --next-key-file`). */
export function loadSignerFile(path: string, flag: string): Signer {
  checkKeyFileType(path, flag);
  try {
    return loadSigningKey({ file: path });
  } catch (err) {
    throw keyFailure(err, flag, { privateKey: true });
  }
}

/** A key that must never sign: commands that only read hand it to the engine, which needs some signer. */
export function readOnlySigner(command: string): Signer {
  const { signer } = generateKeyPair();
  return {
    keyId: signer.keyId,
    publicKeyRaw: signer.publicKeyRaw,
    publicKeyHex: signer.publicKeyHex,
    sign: () => {
      throw new Error(`${command} only reads; it has no signing key and must not append to the chain`);
    },
  };
}

/** Commander collector for repeatable --pubkey. */
export function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/** --pubkey values: 64 hex characters, an SPKI PEM, or a file holding either (a .pub.hex or .pub.pem). */
export function loadPublicKeys(specs: readonly string[] | undefined): PublicKeyInfo[] {
  if (specs === undefined || specs.length === 0) {
    throw new CliError(
      "give the trusted public key with --pubkey HEX|FILE (the .pub.hex or .pub.pem `leash keygen` wrote)",
      EXIT_BAD_INPUT,
    );
  }
  return specs.map((spec) => {
    checkKeyFileType(spec, "--pubkey");
    try {
      return loadPublicKey(spec);
    } catch (err) {
      throw keyFailure(err, "--pubkey");
    }
  });
}
