// An Envelope serialized by hand, byte for byte what protobuf-es's toBinary writes (fields by number,
// zero values left out), for the payloads of every call (PreExec, its answer, PostExec); others via toBinary.
//
// protobuf-es encodes through a chunked writer and a TextEncoder per string, then joins the chunks, and
// does so twice for a payload (the submessage, then the envelope around it): about half of what a
// client spends on a call. This writes each field once into one buffer sized up front. It checks
// nothing a schema would (the caller built the message with create()); a payload it does not know,
// or one with unknown fields or map entries, goes through toBinary and is copied in.

import { type DescMessage, toBinary } from "@bufbuild/protobuf";
import {
  type Envelope,
  EnvelopeSchema,
  type PostExecNotification,
  type PreExecRequest,
  type PreExecResponse,
} from "./gen/shackle/sp1/shackle_pb.js";

const VARINT = 0;
const FIXED64 = 1;
const LEN = 2;

/** Bytes a string takes in UTF-8 (short ASCII-only strings without a native call). */
function utf8Length(s: string): number {
  if (s.length > 64) return Buffer.byteLength(s, "utf8");
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return Buffer.byteLength(s, "utf8");
  return s.length;
}

function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

/** A uint64/int64 as protobuf writes it: two's complement, so a negative one takes ten bytes. */
function bigVarintSize(b: bigint): number {
  if (b >= 0n && b <= 0x1f_ffff_ffff_ffffn) return varintSize(Number(b));
  let v = BigInt.asUintN(64, b);
  let size = 1;
  while (v >= 0x80n) {
    v >>= 7n;
    size++;
  }
  return size;
}

/** An int32 or enum: a negative one is sign-extended to 64 bits (ten bytes). */
function int32Size(n: number): number {
  return n < 0 ? 10 : varintSize(n);
}

/** Sizes, then writes, the fields of one message; `pos` moves on as it writes. */
class Writer {
  pos = 0;
  constructor(readonly buf: Buffer) {}

  varint(n: number): void {
    const buf = this.buf;
    while (n >= 0x80) {
      buf[this.pos++] = (n % 128) | 0x80;
      n = Math.floor(n / 128);
    }
    buf[this.pos++] = n;
  }

  bigVarint(b: bigint): void {
    if (b >= 0n && b <= 0x1f_ffff_ffff_ffffn) {
      this.varint(Number(b));
      return;
    }
    let v = BigInt.asUintN(64, b);
    while (v >= 0x80n) {
      this.buf[this.pos++] = Number(v & 0x7fn) | 0x80;
      v >>= 7n;
    }
    this.buf[this.pos++] = Number(v);
  }

  int32(n: number): void {
    if (n >= 0) this.varint(n);
    else this.bigVarint(BigInt(n));
  }

  tag(field: number, wireType: number): void {
    this.varint(field * 8 + wireType);
  }

  string(s: string, length: number): void {
    this.varint(length);
    this.pos +=
      length === s.length && length < 16 ? this.#ascii(s) : this.buf.write(s, this.pos, length, "utf8");
  }

  #ascii(s: string): number {
    for (let i = 0; i < s.length; i++) this.buf[this.pos + i] = s.charCodeAt(i);
    return s.length;
  }

  bytes(b: Uint8Array): void {
    this.varint(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }

  double(d: number): void {
    this.buf.writeDoubleLE(d, this.pos);
    this.pos += 8;
  }
}

/**
 * One message's fields as a list the size pass and the write pass share: each entry a field number,
 * a kind, and its value (zero values never listed). Strings carry their UTF-8 length.
 */
type Field =
  | { n: number; k: "s"; v: string; len: number }
  | { n: number; k: "u"; v: bigint }
  | { n: number; k: "i"; v: number }
  | { n: number; k: "d"; v: number }
  | { n: number; k: "b"; v: Uint8Array }
  | { n: number; k: "m"; v: Field[]; len: number }
  | { n: number; k: "raw"; v: Uint8Array };

class Fields {
  readonly list: Field[] = [];
  string(n: number, v: string): this {
    if (v !== "") this.list.push({ n, k: "s", v, len: utf8Length(v) });
    return this;
  }
  u64(n: number, v: bigint): this {
    if (v !== 0n) this.list.push({ n, k: "u", v });
    return this;
  }
  int32(n: number, v: number): this {
    if (v !== 0) this.list.push({ n, k: "i", v });
    return this;
  }
  bool(n: number, v: boolean): this {
    if (v) this.list.push({ n, k: "i", v: 1 });
    return this;
  }
  double(n: number, v: number): this {
    // toBinary leaves out +0 only: -0 is not the zero value (its bits differ).
    if (!Object.is(v, 0)) this.list.push({ n, k: "d", v });
    return this;
  }
  bytes(n: number, v: Uint8Array): this {
    if (v.length > 0) this.list.push({ n, k: "b", v });
    return this;
  }
}

function fieldSize(f: Field): number {
  const tag = varintSize(f.n * 8);
  switch (f.k) {
    case "s":
      return tag + varintSize(f.len) + f.len;
    case "u":
      return tag + bigVarintSize(f.v);
    case "i":
      return tag + int32Size(f.v);
    case "d":
      return tag + 8;
    case "b":
      return tag + varintSize(f.v.length) + f.v.length;
    case "m":
      return tag + varintSize(f.len) + f.len;
    case "raw":
      return tag + varintSize(f.v.length) + f.v.length;
  }
}

function sizeOf(list: readonly Field[]): number {
  let size = 0;
  for (const f of list) size += fieldSize(f);
  return size;
}

function write(w: Writer, list: readonly Field[]): void {
  for (const f of list) {
    switch (f.k) {
      case "s":
        w.tag(f.n, LEN);
        w.string(f.v, f.len);
        break;
      case "u":
        w.tag(f.n, VARINT);
        w.bigVarint(f.v);
        break;
      case "i":
        w.tag(f.n, VARINT);
        w.int32(f.v);
        break;
      case "d":
        w.tag(f.n, FIXED64);
        w.double(f.v);
        break;
      case "b":
      case "raw":
        w.tag(f.n, LEN);
        w.bytes(f.v);
        break;
      case "m":
        w.tag(f.n, LEN);
        w.varint(f.len);
        write(w, f.v);
        break;
    }
  }
}

function preExecFields(m: PreExecRequest): Field[] | null {
  if (m.$unknown !== undefined || Object.keys(m.tags).length > 0) return null;
  return new Fields()
    .string(1, m.sessionId)
    .u64(2, m.callNumber)
    .string(3, m.toolName)
    .bytes(4, m.toolParamsHash)
    .double(5, m.estimatedCostUsd)
    .string(6, m.parentGuardId)
    .u64(7, m.nonce)
    .string(100, m.toolParamsJson)
    .string(101, m.estimatedCostUsdDecimal).list;
}

function preExecResponseFields(m: PreExecResponse): Field[] | null {
  if (m.$unknown !== undefined) return null;
  return new Fields()
    .string(1, m.sessionId)
    .u64(2, m.callNumber)
    .int32(3, m.verdict)
    .int32(4, m.denyReason)
    .string(5, m.humanReadableReason)
    .double(6, m.budgetRemainingUsd)
    .int32(7, m.repeatCount)
    .u64(8, m.daemonTimeNs)
    .bool(9, m.probabilisticDeny)
    .string(100, m.reason)
    .string(101, m.budgetRemainingUsdDecimal)
    .string(102, m.receipt)
    .u64(103, m.chainSeq)
    .string(104, m.entryHash)
    .string(105, m.hitlRequestId)
    .u64(106, m.hitlExpiresNs).list;
}

function postExecFields(m: PostExecNotification): Field[] | null {
  if (m.$unknown !== undefined) return null;
  return new Fields()
    .string(1, m.sessionId)
    .u64(2, m.callNumber)
    .double(3, m.actualCostUsd)
    .bool(4, m.success)
    .string(5, m.errorMessage)
    .u64(6, m.durationMs)
    .u64(7, m.tokensIn)
    .u64(8, m.tokensOut)
    .string(9, m.modelUsed)
    .string(100, m.actualCostUsdDecimal)
    .string(101, m.idempotencyKey)
    .bool(102, m.ackRequested).list;
}

/** Each payload case's field number and message type, from the schema. */
const PAYLOAD_DESC = new Map<string, { n: number; desc: DescMessage }>(
  EnvelopeSchema.fields
    .filter((f) => f.oneof?.localName === "payload" && f.fieldKind === "message")
    .map((f) => [f.localName, { n: f.number, desc: f.message as DescMessage }]),
);

/**
 * The payloads written by hand, each with the field numbers its writer knows: one whose schema has
 * other fields (a newer proto) goes through toBinary instead, never half written.
 */
const BY_HAND: ReadonlyMap<string, (value: never) => Field[] | null> = new Map(
  (
    [
      ["preExec", preExecFields, "1,2,3,4,5,6,7,8,100,101"],
      ["preExecResponse", preExecResponseFields, "1,2,3,4,5,6,7,8,9,100,101,102,103,104,105,106"],
      ["postExec", postExecFields, "1,2,3,4,5,6,7,8,9,100,101,102"],
    ] as const
  )
    .filter(([name, , numbers]) => {
      const desc = PAYLOAD_DESC.get(name)?.desc;
      return desc !== undefined && desc.fields.map((f) => f.number).join(",") === numbers;
    })
    .map(([name, fields]) => [name, fields as (value: never) => Field[] | null]),
);

/** The payload as a field of the envelope: by hand for the per-call messages, else toBinary's bytes. */
function payloadField(payload: Envelope["payload"]): Field | null {
  if (payload.case === undefined) return null;
  const known = PAYLOAD_DESC.get(payload.case);
  if (known === undefined) throw new TypeError(`unknown payload case ${String(payload.case)}`);
  const fields = BY_HAND.get(payload.case)?.(payload.value as never) ?? null;
  if (fields === null) return { n: known.n, k: "raw", v: toBinary(known.desc, payload.value) };
  return { n: known.n, k: "m", v: fields, len: sizeOf(fields) };
}

/**
 * The envelope's bytes without its hmac field (what the MAC covers), in a buffer with `headroom` free
 * bytes before them and `tailroom` after: what signedEnvelopeBytes fills in. Falls back to toBinary
 * for an envelope with unknown fields.
 */
export function unsignedEnvelopeBytes(
  envelope: Envelope,
  headroom: number,
  tailroom: number,
): { buffer: Uint8Array; end: number } {
  if (envelope.$unknown !== undefined) {
    const bytes = toBinary(EnvelopeSchema, { ...envelope, hmac: new Uint8Array(0) });
    const buffer = new Uint8Array(headroom + bytes.length + tailroom);
    buffer.set(bytes, headroom);
    return { buffer, end: headroom + bytes.length };
  }
  const head = new Fields()
    .string(1, envelope.protocolVersion)
    .string(2, envelope.messageId)
    .string(3, envelope.correlationId)
    .u64(4, envelope.clientTimestampNs)
    .u64(5, envelope.serverTimestampNs).list;
  const payload = payloadField(envelope.payload);
  const keyId = new Fields().string(102, envelope.keyId).list;
  // Field order is by number: key_id (102) comes after payload cases below it, before those above.
  const list =
    payload === null
      ? [...head, ...keyId]
      : payload.n < 102
        ? [...head, payload, ...keyId]
        : [...head, ...keyId, payload];
  const size = sizeOf(list);
  const buf = Buffer.allocUnsafe(headroom + size + tailroom);
  const w = new Writer(buf);
  w.pos = headroom;
  write(w, list);
  return { buffer: new Uint8Array(buf.buffer, buf.byteOffset, buf.length), end: w.pos };
}
