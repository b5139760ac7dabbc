// Ed25519 signing keys for the chain: generate, write key files safely, load a signer, load public keys.
// Node only (node:crypto, node:fs). Verification needs just a raw public key: see ./verify/keys.ts.

import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign } from "node:crypto";
import {
  closeSync,
  constants,
  existsSync,
  fstatSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { ChainError, KeyFileError } from "./errors.js";
import { sodiumSigner } from "./sodium.js";
import { bytesToHex } from "./verify/encoding.js";
import { keyId, publicKeyBytes } from "./verify/keys.js";

/** The environment variable a signing key may come from: PEM, or base64 of the PKCS#8 DER. */
export const SIGNING_KEY_ENV = "LEASH_SIGNING_KEY";

/** A public key in the three forms callers need. */
export interface PublicKeyInfo {
  readonly keyId: string;
  readonly publicKeyRaw: Uint8Array;
  /** The raw key as 64 lowercase hex characters. */
  readonly publicKeyHex: string;
}

/** What the chain signs with. `sign` returns the 64-byte Ed25519 signature of `message`. */
export interface Signer extends PublicKeyInfo {
  sign(message: Uint8Array): Uint8Array;
  /** What computes the signatures, for reports: createSigner's are "libsodium" or "node:crypto". */
  readonly implementation?: string;
}

export interface GeneratedKeyPair extends PublicKeyInfo {
  /** PKCS#8 PEM; keep it secret (writeKeyFiles stores it with mode 0600). */
  readonly privateKeyPem: string;
  /** SPKI PEM. */
  readonly publicKeyPem: string;
  readonly signer: Signer;
}

/** A fresh Ed25519 key pair (also the `--ephemeral-key` case: use `.signer` and never write it). */
export function generateKeyPair(): GeneratedKeyPair {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const signer = createSigner(privateKey);
  return {
    keyId: signer.keyId,
    publicKeyRaw: signer.publicKeyRaw,
    publicKeyHex: signer.publicKeyHex,
    privateKeyPem: privateKey.export({ format: "pem", type: "pkcs8" }).toString(),
    publicKeyPem: publicKey.export({ format: "pem", type: "spki" }).toString(),
    signer,
  };
}

/**
 * A signer over an Ed25519 private key: a KeyObject, a PKCS#8 PEM, or base64 of the PKCS#8 DER.
 * @throws ChainError "key_invalid" / "key_wrong_type".
 */
export function createSigner(privateKey: KeyObject | string): Signer {
  const key = typeof privateKey === "string" ? parsePrivateKey(privateKey, "the key text") : privateKey;
  if (key.type !== "private") {
    throw new ChainError("key_wrong_type", "a signer needs the private key; this is a public key");
  }
  if (key.asymmetricKeyType !== "ed25519") {
    throw new ChainError("key_wrong_type", `the signing key must be Ed25519, not ${key.asymmetricKeyType}`);
  }
  const publicKeyRaw = rawPublicKey(createPublicKey(key));
  const id = keyId(publicKeyRaw);
  const sodiumSign = fasterSigner(key, publicKeyRaw);
  return {
    keyId: id,
    publicKeyRaw,
    publicKeyHex: bytesToHex(publicKeyRaw),
    // libsodium where it loads (it signs with the key expanded once, see sodiumSigner); otherwise
    // node:crypto, where Ed25519 takes no digest argument (null) and hashes the message itself.
    // Same signatures either way (RFC 8032 is deterministic).
    ...(sodiumSign === null
      ? { sign: (message: Uint8Array) => sign(null, message, key), implementation: "node:crypto" }
      : { sign: sodiumSign, implementation: "libsodium" }),
  };
}

/** The fixed start of an Ed25519 PKCS#8 DER private key (RFC 8410); its last 32 bytes are the seed. */
const ED25519_PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

/** libsodium's signer for this key (see sodium.ts), or null to keep node:crypto's. */
function fasterSigner(
  key: KeyObject,
  publicKeyRaw: Uint8Array,
): ((message: Uint8Array) => Uint8Array) | null {
  // DER into a Buffer rather than JWK: a Buffer can be zeroed afterwards, a base64 string cannot.
  const der = key.export({ format: "der", type: "pkcs8" });
  try {
    if (der.length !== 48 || !der.subarray(0, 16).equals(ED25519_PKCS8_PREFIX)) return null;
    return sodiumSigner(der.subarray(16), publicKeyRaw);
  } finally {
    der.fill(0);
  }
}

function rawPublicKey(key: KeyObject): Uint8Array {
  const jwk = key.export({ format: "jwk" });
  return new Uint8Array(Buffer.from(jwk.x as string, "base64url"));
}

function parsePrivateKey(text: string, where: string): KeyObject {
  const trimmed = text.trim();
  if (trimmed.startsWith("-----BEGIN")) {
    if (/-----BEGIN (RSA |EC )?PUBLIC KEY-----/.test(trimmed)) {
      throw new ChainError("key_wrong_type", `${where} is a public key; signing needs the private key`);
    }
    if (trimmed.includes("ENCRYPTED PRIVATE KEY")) {
      throw new ChainError(
        "key_invalid",
        `${where} is an encrypted private key; give the unencrypted PKCS#8 PEM`,
      );
    }
    try {
      return createPrivateKey({ key: trimmed, format: "pem" });
    } catch (error) {
      throw new ChainError("key_invalid", `${where} is not a readable PKCS#8 PEM private key`, {
        cause: error,
      });
    }
  }
  const compact = trimmed.replace(/\s+/g, "");
  if (compact === "" || !/^[A-Za-z0-9+/_-]+={0,2}$/.test(compact)) {
    throw new ChainError("key_invalid", `${where} is neither a PEM private key nor base64 of a PKCS#8 key`);
  }
  try {
    return createPrivateKey({ key: Buffer.from(compact, "base64"), format: "der", type: "pkcs8" });
  } catch (error) {
    throw new ChainError("key_invalid", `${where} is base64, but not of a PKCS#8 private key`, {
      cause: error,
    });
  }
}

export interface WriteKeyFilesOptions {
  /** Replace existing files (atomically, by rename). Without it, any existing target is an error. */
  overwrite?: boolean;
  /** Defaults to the private key path with ".key"/".pem" replaced by ".pub.pem". */
  publicKeyPath?: string;
  /** Defaults to the private key path with ".key"/".pem" replaced by ".pub.hex". */
  publicKeyHexPath?: string;
}

export interface KeyFilePaths {
  privateKeyPath: string;
  publicKeyPath: string;
  publicKeyHexPath: string;
}

/**
 * Where a key pair's files go, the one naming scheme of the library and `leash keygen`: the private key
 * at `privateKeyPath`, its public halves beside it with a trailing ".key"/".pem" replaced
 * (`leash.key` → `leash.pub.pem`, `leash.pub.hex`; `signing` → `signing.pub.pem`, `signing.pub.hex`).
 */
export function keyFilePathsFor(privateKeyPath: string): KeyFilePaths {
  const stem = privateKeyPath.replace(/\.(key|pem)$/, "");
  return { privateKeyPath, publicKeyPath: `${stem}.pub.pem`, publicKeyHexPath: `${stem}.pub.hex` };
}

/**
 * Writes the private key (PKCS#8 PEM, mode 0600), the public key (SPKI PEM) and the raw public key
 * (64 hex + newline). The private key's mode is checked after writing, because a umask cannot add
 * bits but a filesystem (a network mount, a Windows share) may ignore them.
 * @throws KeyFileError "key_exists" (nothing is written), "key_permissions", "key_unreadable".
 */
export function writeKeyFiles(
  pair: Pick<GeneratedKeyPair, "privateKeyPem" | "publicKeyPem" | "publicKeyHex">,
  privateKeyPath: string,
  options: WriteKeyFilesOptions = {},
): KeyFilePaths {
  const defaults = keyFilePathsFor(privateKeyPath);
  const paths: KeyFilePaths = {
    privateKeyPath,
    publicKeyPath: options.publicKeyPath ?? defaults.publicKeyPath,
    publicKeyHexPath: options.publicKeyHexPath ?? defaults.publicKeyHexPath,
  };
  const overwrite = options.overwrite === true;
  if (!overwrite) {
    for (const path of Object.values(paths)) {
      if (existsSync(path)) {
        throw new KeyFileError("key_exists", path, `${path} exists; pass overwrite to replace the key files`);
      }
    }
  }
  writeSecret(privateKeyPath, pair.privateKeyPem, overwrite);
  writePublic(paths.publicKeyPath, pair.publicKeyPem, overwrite);
  writePublic(paths.publicKeyHexPath, `${pair.publicKeyHex}\n`, overwrite);
  return paths;
}

function writeSecret(path: string, text: string, overwrite: boolean): void {
  // Overwriting goes through a fresh 0600 file and a rename, so the old key never sits half-replaced
  // and the new one is never briefly readable with the old file's (possibly wider) mode.
  const target = overwrite ? `${path}.tmp-${process.pid}-${Date.now()}` : path;
  let fd: number;
  try {
    fd = openSync(target, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EEXIST") throw new KeyFileError("key_exists", path, `${path} exists`, { cause: error });
    throw new KeyFileError("key_unreadable", path, `cannot create ${target}`, { cause: error });
  }
  try {
    writeSync(fd, text);
    if (process.platform !== "win32" && (fstatSync(fd).mode & 0o077) !== 0) {
      throw new KeyFileError(
        "key_permissions",
        path,
        `${target} was created readable by others; check the filesystem`,
      );
    }
  } catch (error) {
    closeSync(fd);
    unlinkSync(target);
    throw error;
  }
  closeSync(fd);
  if (target !== path) renameSync(target, path);
  if (process.platform !== "win32" && (statSync(path).mode & 0o077) !== 0) {
    throw new KeyFileError(
      "key_permissions",
      path,
      `${path} is readable by group or others; run: chmod 600 ${path}`,
    );
  }
}

function writePublic(path: string, text: string, overwrite: boolean): void {
  try {
    writeFileSync(path, text, { flag: overwrite ? "w" : "wx", mode: 0o644 });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EEXIST") throw new KeyFileError("key_exists", path, `${path} exists`, { cause: error });
    throw new KeyFileError("key_unreadable", path, `cannot write ${path}`, { cause: error });
  }
}

export interface LoadSigningKeyOptions {
  /** Path of a PKCS#8 PEM (or base64 DER) private key file, mode 0600. Wins over `env`. */
  file?: string;
  /** Where to look for LEASH_SIGNING_KEY; defaults to process.env. */
  env?: Readonly<Record<string, string | undefined>>;
}

/**
 * The daemon's signer, from a key file or the LEASH_SIGNING_KEY environment variable. A key file
 * that group or others can access is refused: anyone who can read it can forge the audit chain.
 * @throws KeyFileError / ChainError with code key_not_found, key_unreadable, key_permissions,
 *   key_invalid or key_wrong_type.
 */
export function loadSigningKey(options: LoadSigningKeyOptions = {}): Signer {
  if (options.file !== undefined) return createSigner(readPrivateKeyFile(options.file));
  const env = options.env ?? process.env;
  const text = env[SIGNING_KEY_ENV];
  if (text === undefined || text.trim() === "") {
    throw new ChainError(
      "key_not_found",
      `no signing key: give a key file or set ${SIGNING_KEY_ENV} (PEM or base64 PKCS#8); generate one with generateKeyPair()`,
    );
  }
  return createSigner(parsePrivateKey(text, SIGNING_KEY_ENV));
}

function readPrivateKeyFile(path: string): KeyObject {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT")
      throw new KeyFileError("key_not_found", path, `no key file at ${path}`, { cause: error });
    throw new KeyFileError("key_unreadable", path, `cannot open key file ${path} (${code})`, {
      cause: error,
    });
  }
  try {
    // fstat on the open descriptor: checking the path and then reading it would leave a window
    // in which the file could be swapped.
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw new KeyFileError("key_unreadable", path, `${path} is not a regular file`);
    if (process.platform !== "win32" && (stat.mode & 0o077) !== 0) {
      const mode = (stat.mode & 0o777).toString(8).padStart(4, "0");
      throw new KeyFileError(
        "key_permissions",
        path,
        `private key file ${path} has mode ${mode}: group or others can access it; run: chmod 600 ${path}`,
      );
    }
    let text: string;
    try {
      text = readFileSync(fd, "utf8");
    } catch (error) {
      throw new KeyFileError("key_unreadable", path, `cannot read key file ${path}`, { cause: error });
    }
    try {
      return parsePrivateKey(text, path);
    } catch (error) {
      if (ChainError.isInstance(error)) {
        throw new KeyFileError(error.code, path, error.message, { cause: error.cause });
      }
      throw error;
    }
  } finally {
    closeSync(fd);
  }
}

/**
 * A public key from 64 hex characters, an SPKI PEM, raw bytes, or the path of a file holding
 * either text form. @throws ChainError key_invalid / key_wrong_type, KeyFileError key_not_found.
 */
export function loadPublicKey(source: string | Uint8Array): PublicKeyInfo {
  if (source instanceof Uint8Array) return publicKeyInfo(publicKeyBytes(source));
  const parsed = parsePublicKeyText(source, "the key text");
  if (parsed !== null) return parsed;
  let text: string;
  try {
    text = readFileSync(source, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") {
      throw new KeyFileError(
        "key_not_found",
        source,
        `${source} is not a public key (64 hex characters or SPKI PEM) nor an existing file`,
        { cause: error },
      );
    }
    throw new KeyFileError("key_unreadable", source, `cannot read public key file ${source} (${code})`, {
      cause: error,
    });
  }
  const fromFile = parsePublicKeyText(text, source);
  if (fromFile === null) {
    throw new KeyFileError(
      "key_invalid",
      source,
      `${source} holds neither 64 hex characters nor an SPKI PEM`,
    );
  }
  return fromFile;
}

function publicKeyInfo(raw: Uint8Array): PublicKeyInfo {
  return { keyId: keyId(raw), publicKeyRaw: raw, publicKeyHex: bytesToHex(raw) };
}

/** null when the text is neither form (then it may be a path). */
function parsePublicKeyText(text: string, where: string): PublicKeyInfo | null {
  const trimmed = text.trim();
  if (/^[0-9a-fA-F]{64}$/.test(trimmed)) return publicKeyInfo(publicKeyBytes(trimmed));
  if (!trimmed.startsWith("-----BEGIN")) return null;
  if (/PRIVATE KEY-----/.test(trimmed)) {
    throw new ChainError("key_wrong_type", `${where} is a private key; verification takes the public key`);
  }
  let key: KeyObject;
  try {
    key = createPublicKey({ key: trimmed, format: "pem" });
  } catch (error) {
    throw new ChainError("key_invalid", `${where} is not a readable SPKI PEM public key`, { cause: error });
  }
  if (key.asymmetricKeyType !== "ed25519") {
    throw new ChainError(
      "key_wrong_type",
      `${where} is a ${key.asymmetricKeyType} key; the chain uses Ed25519`,
    );
  }
  return publicKeyInfo(rawPublicKey(key));
}
