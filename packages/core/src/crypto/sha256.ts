// SHA-256 of a JavaScript string's UTF-8 bytes, as lowercase hex, in plain JavaScript.
// Tuned for the short inputs of argument digests (no node:crypto: core must run in a browser);
// it is not a streaming or general-purpose hash API.

const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);
const W = new Int32Array(64);
const H = new Int32Array(8);
const HEX: string[] = [];
for (let i = 0; i < 256; i++) HEX.push(i.toString(16).padStart(2, "0"));

let buffer = new Uint8Array(1024);

/** UTF-8 encodes `text` into the shared buffer (with room for padding); returns the byte length. */
function encode(text: string): number {
  const n = text.length;
  if (buffer.length < n * 3 + 72) buffer = new Uint8Array(n * 3 + 72);
  const b = buffer;
  let p = 0;
  for (let i = 0; i < n; i++) {
    let c = text.charCodeAt(i);
    if (c < 0x80) {
      b[p++] = c;
    } else if (c < 0x800) {
      b[p++] = 0xc0 | (c >> 6);
      b[p++] = 0x80 | (c & 63);
    } else if (c >= 0xd800 && c < 0xdc00 && i + 1 < n) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d < 0xe000) {
        i++;
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        b[p++] = 0xf0 | (c >> 18);
        b[p++] = 0x80 | ((c >> 12) & 63);
        b[p++] = 0x80 | ((c >> 6) & 63);
        b[p++] = 0x80 | (c & 63);
      } else {
        // A lone surrogate has no UTF-8 form; canonical JSON rejects it before it gets here.
        b[p++] = 0xef;
        b[p++] = 0xbf;
        b[p++] = 0xbd;
      }
    } else {
      b[p++] = 0xe0 | (c >> 12);
      b[p++] = 0x80 | ((c >> 6) & 63);
      b[p++] = 0x80 | (c & 63);
    }
  }
  return p;
}

function compress(b: Uint8Array, offset: number): void {
  for (let t = 0; t < 16; t++) {
    const j = offset + t * 4;
    W[t] = (b[j]! << 24) | (b[j + 1]! << 16) | (b[j + 2]! << 8) | b[j + 3]!;
  }
  for (let t = 16; t < 64; t++) {
    const x = W[t - 15]!;
    const y = W[t - 2]!;
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    W[t] = (W[t - 16]! + s0 + W[t - 7]! + s1) | 0;
  }
  let a = H[0]!;
  let bb = H[1]!;
  let c = H[2]!;
  let d = H[3]!;
  let e = H[4]!;
  let f = H[5]!;
  let g = H[6]!;
  let h = H[7]!;
  for (let t = 0; t < 64; t++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[t]! + W[t]!) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (S0 + ((a & bb) ^ (a & c) ^ (bb & c))) | 0;
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = bb;
    bb = a;
    a = (t1 + t2) | 0;
  }
  H[0] = (H[0]! + a) | 0;
  H[1] = (H[1]! + bb) | 0;
  H[2] = (H[2]! + c) | 0;
  H[3] = (H[3]! + d) | 0;
  H[4] = (H[4]! + e) | 0;
  H[5] = (H[5]! + f) | 0;
  H[6] = (H[6]! + g) | 0;
  H[7] = (H[7]! + h) | 0;
}

/** Lowercase hex SHA-256 of the UTF-8 encoding of `text` (well-formed UTF-16 expected). */
export function sha256Hex(text: string): string {
  return digestBuffer(encode(text));
}

/** Lowercase hex SHA-256 of `bytes` (canonical JSON already written as UTF-8). */
export function sha256HexOfBytes(bytes: Uint8Array): string {
  const n = bytes.length;
  if (buffer.length < n + 72) buffer = new Uint8Array(n + 72);
  buffer.set(bytes);
  return digestBuffer(n);
}

/** Pads and hashes the first `length` bytes of the shared buffer. */
function digestBuffer(length: number): string {
  const b = buffer;
  // Padding: 0x80, zeros, then the bit length as a 64-bit big-endian integer.
  const total = (((length + 8) >> 6) + 1) << 6;
  b[length] = 0x80;
  b.fill(0, length + 1, total);
  const bits = length * 8;
  b[total - 5] = Math.floor(bits / 0x100000000) & 0xff;
  b[total - 4] = (bits >>> 24) & 0xff;
  b[total - 3] = (bits >>> 16) & 0xff;
  b[total - 2] = (bits >>> 8) & 0xff;
  b[total - 1] = bits & 0xff;
  H[0] = 0x6a09e667;
  H[1] = 0xbb67ae85;
  H[2] = 0x3c6ef372;
  H[3] = 0xa54ff53a;
  H[4] = 0x510e527f;
  H[5] = 0x9b05688c;
  H[6] = 0x1f83d9ab;
  H[7] = 0x5be0cd19;
  for (let offset = 0; offset < total; offset += 64) compress(b, offset);
  let out = "";
  for (let i = 0; i < 8; i++) {
    const v = H[i]!;
    out += HEX[(v >>> 24) & 0xff]! + HEX[(v >>> 16) & 0xff]! + HEX[(v >>> 8) & 0xff]! + HEX[v & 0xff]!;
  }
  return out;
}
