// Byte encodings the chain format uses (UTF-8, lowercase hex, unpadded base64url), in plain JavaScript.
// Browser-safe on purpose (no Buffer); decoding is strict, because a lenient decoder lets edits pass.

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const DECODE = new Int16Array(128).fill(-1);
for (let i = 0; i < ALPHABET.length; i++) DECODE[ALPHABET.charCodeAt(i)] = i;

const HEX: string[] = [];
for (let i = 0; i < 256; i++) HEX.push(i.toString(16).padStart(2, "0"));

const encoder = new TextEncoder();

export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

export function bytesToHex(bytes: Uint8Array): string {
  let out = "";
  for (let i = 0; i < bytes.length; i++) out += HEX[bytes[i]!];
  return out;
}

/** Strict: an even number of hex digits (either case), nothing else; null otherwise. */
export function hexToBytes(hex: string): Uint8Array | null {
  if (hex.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(hex)) return null;
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = Number.parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  return out;
}

/** RFC 4648 §5 base64url without padding, as JWS (RFC 7515 §2) requires. */
export function base64UrlEncode(bytes: Uint8Array): string {
  let out = "";
  const n = bytes.length;
  let i = 0;
  for (; i + 2 < n; i += 3) {
    const v = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += ALPHABET[v >> 18]! + ALPHABET[(v >> 12) & 63]! + ALPHABET[(v >> 6) & 63]! + ALPHABET[v & 63]!;
  }
  if (n - i === 1) {
    const v = bytes[i]! << 16;
    out += ALPHABET[v >> 18]! + ALPHABET[(v >> 12) & 63]!;
  } else if (n - i === 2) {
    const v = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
    out += ALPHABET[v >> 18]! + ALPHABET[(v >> 12) & 63]! + ALPHABET[(v >> 6) & 63]!;
  }
  return out;
}

/**
 * Decodes unpadded base64url, or returns null. Only the canonical spelling is accepted: the unused
 * low bits of the last character must be zero. Otherwise four different last characters decode to
 * the same signature, and a one-character edit of a stored signature would go unnoticed.
 */
export function base64UrlDecode(text: string): Uint8Array | null {
  const n = text.length;
  if (n % 4 === 1) return null;
  const out = new Uint8Array(Math.floor((n * 3) / 4));
  let o = 0;
  let i = 0;
  for (; i + 3 < n; i += 4) {
    const a = sextet(text, i);
    const b = sextet(text, i + 1);
    const c = sextet(text, i + 2);
    const d = sextet(text, i + 3);
    if ((a | b | c | d) < 0) return null;
    const v = (a << 18) | (b << 12) | (c << 6) | d;
    out[o++] = v >> 16;
    out[o++] = (v >> 8) & 255;
    out[o++] = v & 255;
  }
  const rest = n - i;
  if (rest === 2) {
    const a = sextet(text, i);
    const b = sextet(text, i + 1);
    if ((a | b) < 0 || (b & 15) !== 0) return null;
    out[o++] = (a << 2) | (b >> 4);
  } else if (rest === 3) {
    const a = sextet(text, i);
    const b = sextet(text, i + 1);
    const c = sextet(text, i + 2);
    if ((a | b | c) < 0 || (c & 3) !== 0) return null;
    const v = (a << 18) | (b << 12) | (c << 6);
    out[o++] = v >> 16;
    out[o++] = (v >> 8) & 255;
  }
  return out;
}

function sextet(text: string, i: number): number {
  const c = text.charCodeAt(i);
  return c < 128 ? DECODE[c]! : -1;
}
