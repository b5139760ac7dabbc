// Small in-test daemons on @leash/wire that play a good, broken or hostile daemon on a real Unix socket.
// The client is the thing under test; these servers decide nothing real (no engine, no store).
import { createHash, generateKeyPairSync, type KeyObject, sign } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import {
  digestToHex,
  type Envelope,
  encodeFrame,
  FrameDecoder,
  openEnvelope,
  type Payload,
  PostExecAckSchema,
  PreExecResponseSchema,
  ReplayWindow,
  sealEnvelope,
  Verdict,
} from "@leash/wire";

export const clock = { nowNs: () => Date.now() * 1e6 };
export const KEY = new Uint8Array(32).fill(7);
export const OTHER_KEY = new Uint8Array(32).fill(9);

export function tempSocketPath(): { path: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), "leash-client-"));
  return { path: join(dir, "d.sock"), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A frame answering `request` with `payload`, sealed as the daemon would (override key or correlation to misbehave). */
export function answer(
  request: Envelope,
  payload: Payload,
  options: { key?: Uint8Array; correlationId?: string } = {},
): Uint8Array {
  return encodeFrame(
    sealEnvelope(payload, {
      key: options.key ?? KEY,
      sender: "daemon",
      clock,
      correlationId: options.correlationId ?? request.messageId,
    }),
  );
}

export type Responder = (request: Envelope, socket: Socket) => void | Promise<void>;

export interface FakeDaemon {
  received: Envelope[];
  sockets: Set<Socket>;
  /** Connections accepted so far. */
  readonly accepted: number;
  close(): Promise<void>;
}

/**
 * Listens on `path`, authenticates each agent envelope with KEY, acknowledges post_execs and hands
 * every other one to `respond`.
 */
export async function startFakeDaemon(path: string, respond: Responder): Promise<FakeDaemon> {
  const received: Envelope[] = [];
  const sockets = new Set<Socket>();
  let accepted = 0;
  const replay = new ReplayWindow({ clock });
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    accepted++;
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    const decoder = new FrameDecoder();
    socket.on("data", (chunk) => {
      for (const body of decoder.push(new Uint8Array(chunk))) {
        const envelope = openEnvelope(body, { keyFor: () => KEY, sender: "agent", replay });
        received.push(envelope);
        // As Leash's daemon does: a post_exec that asks for it is acknowledged (the responder
        // plays the rest of the daemon).
        if (envelope.payload.case === "postExec" && envelope.payload.value.ackRequested) {
          const { sessionId, callNumber } = envelope.payload.value;
          socket.write(
            answer(envelope, {
              case: "postExecAck",
              value: create(PostExecAckSchema, { sessionId, callNumber }),
            }),
          );
          continue;
        }
        void respond(envelope, socket);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return {
    received,
    sockets,
    get accepted() {
      return accepted;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** An Ed25519 key pair as the daemon's signer would have it, and receipts signed with it. */
export interface TestSigner {
  publicKeyHex: string;
  keyId: string;
  /** A receipt (compact JWS) of a decision entry with `data`, and that entry's hash. */
  receipt(data: Record<string, unknown>, seq?: number): { receipt: string; entryHash: string };
}

export function testSigner(signAs?: { privateKey: KeyObject; kidOf: TestSigner }): TestSigner {
  const pair = generateKeyPairSync("ed25519");
  const raw = Buffer.from(pair.publicKey.export({ format: "jwk" }).x as string, "base64url");
  const keyId = createHash("sha256").update(raw).digest("hex").slice(0, 16);
  const privateKey = signAs?.privateKey ?? pair.privateKey;
  const kid = signAs?.kidOf.keyId ?? keyId;
  return {
    publicKeyHex: raw.toString("hex"),
    keyId,
    receipt(data, seq = 1) {
      const header = Buffer.from(JSON.stringify({ alg: "EdDSA", kid })).toString("base64url");
      const payloadBytes = Buffer.from(
        JSON.stringify({
          v: 1,
          chain_id: "00000000-0000-7000-8000-000000000000",
          seq,
          entry_id: "00000000-0000-7000-8000-000000000001",
          kind: "decision",
          timestamp_ns: "1",
          prev_hash: "0".repeat(64),
          key_id: kid,
          data,
        }),
      );
      const payload = payloadBytes.toString("base64url");
      const signature = sign(null, Buffer.from(`${header}.${payload}`), privateKey).toString("base64url");
      return {
        receipt: `${header}.${payload}.${signature}`,
        entryHash: createHash("sha256").update(payloadBytes).digest("hex"),
      };
    },
  };
}

/** A signer that claims `victim`'s key id but signs with a key of its own (a forger). */
export function forgerOf(victim: TestSigner): TestSigner {
  const { privateKey } = generateKeyPairSync("ed25519");
  return testSigner({ privateKey, kidOf: victim });
}

let callCounter = 0;

/** A verdict for `request` (a pre_exec), with a receipt from `signer` binding it unless `bind` changes it. */
export function verdictFor(
  request: Envelope,
  verdict: "ALLOW" | "DENY",
  reason: string,
  signer?: TestSigner,
  bind: Record<string, unknown> = {},
): Payload {
  if (request.payload.case !== "preExec") throw new Error(`not a pre_exec: ${request.payload.case}`);
  const call = request.payload.value;
  const callNumber = ++callCounter;
  let receipt = "";
  let entryHash = "";
  if (signer !== undefined) {
    ({ receipt, entryHash } = signer.receipt(
      {
        session_id: call.sessionId,
        call_number: callNumber,
        tool_name: call.toolName,
        params_hash: digestToHex(call.toolParamsHash),
        nonce: call.nonce === 0n ? null : call.nonce.toString(),
        verdict,
        reason,
        ...bind,
      },
      1,
    ));
  }
  return {
    case: "preExecResponse",
    value: create(PreExecResponseSchema, {
      sessionId: call.sessionId,
      callNumber: BigInt(callNumber),
      verdict: verdict === "ALLOW" ? Verdict.ALLOW : Verdict.DENY,
      reason,
      budgetRemainingUsd: 0.25,
      budgetRemainingUsdDecimal: "0.25",
      receipt,
      chainSeq: 1n,
      entryHash,
    }),
  };
}
