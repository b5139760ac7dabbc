// The browser-safe verification backend: SHA-256 from @noble/hashes, Ed25519 from @noble/curves.
// Slower than node:crypto (see bench/verify.mjs), but it needs nothing from the platform.

import { ed25519 } from "@noble/curves/ed25519.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { base64UrlEncode, bytesToHex, utf8 } from "./encoding.js";
import type { VerifyBackend } from "./verify-chain.js";

const ascii = (text: string): Uint8Array => {
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
};

export const nobleBackend: VerifyBackend = {
  name: "noble",
  sha256Hex: (text) => bytesToHex(sha256(utf8(text))),
  base64Url: (text) => base64UrlEncode(utf8(text)),
  prepareKey: (raw) => raw,
  // zip215: false is RFC 8032 / FIPS 186-5 strictness, which is what OpenSSL (node:crypto) applies;
  // the two backends must accept exactly the same signatures.
  verify: (signingInput, signature, key) => {
    try {
      return ed25519.verify(signature, ascii(signingInput), key as Uint8Array, { zip215: false });
    } catch {
      return false;
    }
  },
};
