// Ed25519 signing through libsodium (the sodium-native addon, prebuilt in its npm package) when it loads
// here. It signs only: verification stays node:crypto / @noble/curves, and without the addon nothing changes.
import { createRequire } from "node:module";

/** The part of sodium-native this module uses (the package ships no type declarations). */
interface Sodium {
  readonly crypto_sign_BYTES: number;
  readonly crypto_sign_PUBLICKEYBYTES: number;
  readonly crypto_sign_SECRETKEYBYTES: number;
  crypto_sign_seed_keypair(publicKey: Buffer, secretKey: Buffer, seed: Buffer): void;
  crypto_sign_detached(signature: Buffer, message: Uint8Array, secretKey: Buffer): void;
  sodium_malloc(size: number): Buffer;
}

let loaded: Sodium | null | undefined;

/** The addon, or null where it does not load (no prebuilt binary for this platform, or disabled). */
function sodium(): Sodium | null {
  if (loaded === undefined) {
    try {
      loaded =
        process.env.LEASH_SIGNER === "node"
          ? null
          : (createRequire(import.meta.url)("sodium-native") as Sodium);
    } catch {
      loaded = null;
    }
  }
  return loaded;
}

/**
 * A libsodium signing function for the Ed25519 key with this 32-byte seed, or null when libsodium
 * is not available or derives another public key from the seed than `publicKey` (never expected;
 * the caller then keeps node:crypto). Ed25519 signatures are deterministic (RFC 8032), so both
 * give the same 64 bytes for the same key and message, and the faster one may sign every decision's
 * entry: libsodium signs with a precomputed expanded key, where node:crypto expands it on every
 * call through OpenSSL's generic key object. The expanded secret key lives in libsodium's
 * guarded memory (sodium_malloc), not on the JavaScript heap; the caller zeroes `seed`.
 */
export function sodiumSigner(
  seed: Buffer,
  publicKey: Uint8Array,
): ((message: Uint8Array) => Uint8Array) | null {
  const na = sodium();
  if (na === null) return null;
  let secretKey: Buffer;
  try {
    // Guarded pages of their own; should the system refuse them, node:crypto signs instead.
    secretKey = na.sodium_malloc(na.crypto_sign_SECRETKEYBYTES);
    const derived = Buffer.alloc(na.crypto_sign_PUBLICKEYBYTES);
    na.crypto_sign_seed_keypair(derived, secretKey, seed);
    if (!derived.equals(publicKey)) return null;
  } catch {
    return null;
  }
  return (message) => {
    const signature = Buffer.allocUnsafe(na.crypto_sign_BYTES);
    na.crypto_sign_detached(signature, message, secretKey);
    return signature;
  };
}
