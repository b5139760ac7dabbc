// A small raw SP/1.0 client for the daemon's tests, built from @leash/wire only (not @leash/client):
// it seals, frames, pairs answers by correlation id, and also sends whatever bytes a test wants.
import { connect, type Socket } from "node:net";
import {
  decodeEnvelope,
  type Envelope,
  encodeFrame,
  FrameDecoder,
  openEnvelope,
  type Payload,
  PendingRequests,
  ReplayWindow,
  sealEnvelope,
} from "@leash/wire";

export const clock = { nowNs: () => Date.now() * 1e6 };

export interface ClientKey {
  readonly key: Uint8Array;
  readonly keyId: string;
}

/** One connection. Answers are opened with the daemon's HMAC; an unpaired one (an Error before a close) goes to `unpaired`. */
export class RawClient {
  readonly pending = new PendingRequests();
  readonly unpaired: Envelope[] = [];
  /** The size of every frame body received, in order (answers' sizes, for the frame bounds). */
  readonly bodySizes: number[] = [];
  readonly replay = new ReplayWindow({ clock });
  closed = false;
  readonly closedPromise: Promise<void>;
  #decoder = new FrameDecoder();

  private constructor(
    readonly socket: Socket,
    readonly key: ClientKey,
  ) {
    this.closedPromise = new Promise((resolve) => socket.once("close", () => resolve()));
    socket.on("data", (chunk: Buffer) => {
      for (const body of this.#decoder.push(chunk)) {
        this.bodySizes.push(body.length);
        let envelope: Envelope;
        try {
          envelope = openEnvelope(body, {
            keyFor: () => this.key.key,
            sender: "daemon",
            replay: this.replay,
          });
        } catch {
          envelope = decodeEnvelope(body); // an unsigned Error (the daemon had no key to sign with)
        }
        if (!this.pending.settle(envelope)) this.unpaired.push(envelope);
      }
    });
    socket.on("error", () => undefined);
    socket.on("close", () => {
      this.closed = true;
      this.pending.failAll();
    });
  }

  static connect(path: string, key: ClientKey): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const socket = connect(path);
      socket.once("connect", () => resolve(new RawClient(socket, key)));
      socket.once("error", reject);
    });
  }

  /** Seals and sends `payload`; resolves with the answer's envelope. */
  request(
    payload: Payload,
    options: { key?: ClientKey; messageId?: string; protocolVersion?: string; timeoutMs?: number } = {},
  ): Promise<Envelope> {
    const key = options.key ?? this.key;
    const body = sealEnvelope(payload, {
      key: key.key,
      keyId: key.keyId,
      sender: "agent",
      clock,
      ...(options.messageId === undefined ? {} : { messageId: options.messageId }),
      ...(options.protocolVersion === undefined ? {} : { protocolVersion: options.protocolVersion }),
    });
    const id = decodeEnvelope(body).messageId;
    const answer = this.pending.wait(id, { timeoutMs: options.timeoutMs ?? 10_000 });
    this.socket.write(encodeFrame(body));
    return answer;
  }

  /** Seals and sends `payload` without waiting for an answer (a PostExec takes none). */
  notify(payload: Payload): void {
    const body = sealEnvelope(payload, { key: this.key.key, keyId: this.key.keyId, sender: "agent", clock });
    this.socket.write(encodeFrame(body));
  }

  /** Sends raw bytes (a frame or not). */
  write(bytes: Uint8Array): void {
    this.socket.write(bytes);
  }

  close(): void {
    this.socket.destroy();
  }
}
