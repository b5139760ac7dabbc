// Fuzz a live `leash serve` with ≥ 100,000 seeded frames — signed requests it must refuse, and random, truncated,
// oversize, bit-flipped, wrongly-signed, replayed ones — pipelined over a few connections at a time. It never
// crashes, answers each with an Error or closes that connection, serves a good client throughout, writes nothing.
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { generateKeyPair } from "@leash/chain";
import {
  decodeEnvelope,
  encodeFrame,
  FrameDecoder,
  GetSessionStateRequestSchema,
  HeartbeatSchema,
  type Payload,
  PostExecNotificationSchema,
  PreExecRequestSchema,
  PreExecResponseSchema,
  RegisterRequestSchema,
  sealEnvelope,
} from "@leash/wire";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clock, RawClient } from "./raw-client.js";
import { ACME, configObject, ensureBuilt, GLOBEX, openStore, scratchDir, serve } from "./support.js";

const FRAMES = 100_000;
const PER_CONNECTION = 25; // 24 signed requests the daemon must refuse, then one frame that ends the stream
const PARALLEL = 4;
const SEED = Number(process.env.LEASH_FUZZ_SEED ?? Date.now() % 1_000_000);

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("fuzzing a live daemon (SQLite)", () => {
  beforeAll(() => ensureBuilt(), 120_000);
  const cleanups: (() => Promise<void> | void)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it(`${FRAMES} frames: no crash, every frame answered with an Error or its connection closed, the chain head unchanged`, async () => {
    const random = mulberry32(SEED);
    const int = (n: number) => Math.floor(random() * n);
    const bytes = (n: number) => Uint8Array.from({ length: n }, () => int(256));
    const text = (n: number) => Buffer.from(bytes(n)).toString("base64").slice(0, n);

    const store = await openStore("sqlite");
    cleanups.push(() => store.close());
    const dir = scratchDir();
    const key = generateKeyPair();
    const keyFile = join(dir, "daemon.key");
    writeFileSync(keyFile, key.privateKeyPem, { mode: 0o600 });
    const configFile = join(dir, "daemon.json");
    writeFileSync(configFile, JSON.stringify(configObject(dir)));
    const socket = join(dir, "leash.sock");
    const daemon = await serve([
      "--config",
      configFile,
      "--store",
      store.url!,
      "--key-file",
      keyFile,
      "--socket",
      socket,
    ]);
    let exited = false;
    daemon.child.once("exit", () => {
      exited = true;
    });
    cleanups.push(() => {
      daemon.child.kill("SIGKILL");
    });

    // The well-behaved client: registered once, then reads its state and heartbeats throughout. It is
    // another organization's: the fuzzer's signed flood spends acme's own rate quota, never globex's.
    const good = await RawClient.connect(socket, GLOBEX);
    const reg = await good.request({
      case: "register",
      value: create(RegisterRequestSchema, { agentId: "good-bot", organizationId: "globex" }),
    });
    const sessionId = (reg.payload.value as { sessionId: string }).sessionId;
    const head = () => store.substrate.transaction((tx) => tx.chain.head());
    const before = await head();
    let goodCalls = 0;
    let fuzzing = true;
    const goodLoop = (async () => {
      while (fuzzing) {
        const payload: Payload =
          goodCalls % 2 === 0
            ? { case: "getSessionState", value: create(GetSessionStateRequestSchema, { sessionId }) }
            : { case: "heartbeat", value: create(HeartbeatSchema, { sessionId }) };
        const answer = await good.request(payload);
        expect(answer.payload.case).toBe(goodCalls % 2 === 0 ? "sessionState" : "heartbeatAck");
        goodCalls++;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    goodLoop.catch(() => undefined); // awaited below; this only keeps an early failure from going unhandled

    /** A signed request that can change nothing: unknown sessions, another organization, payloads that are not requests. */
    const refusable = (): Payload => {
      const sid = `fuzz-${text(8)}`;
      switch (int(6)) {
        case 0:
          return {
            case: "preExec",
            value: create(PreExecRequestSchema, {
              sessionId: sid,
              callNumber: BigInt(int(1000)),
              toolName: text(int(20)),
              toolParamsJson: random() < 0.5 ? text(int(40)) : "{}",
              toolParamsHash: bytes(int(40)),
              estimatedCostUsd: random() * 10,
              estimatedCostUsdDecimal: random() < 0.5 ? text(int(10)) : "",
              nonce: BigInt(int(1e9)),
            }),
          };
        case 1:
          return {
            case: "postExec",
            value: create(PostExecNotificationSchema, {
              sessionId: random() < 0.5 ? sid : "",
              callNumber: BigInt(int(5)),
              actualCostUsdDecimal: text(int(8)),
            }),
          };
        case 2:
          return {
            case: "heartbeat",
            value: create(HeartbeatSchema, { sessionId: sid, localBudgetRemaining: random() }),
          };
        case 3:
          return {
            case: "getSessionState",
            value: create(GetSessionStateRequestSchema, { sessionId: random() < 0.5 ? sid : "" }),
          };
        case 4:
          return {
            case: "register",
            value: create(RegisterRequestSchema, {
              agentId: text(int(10)),
              organizationId: random() < 0.5 ? "globex" : text(6),
            }),
          };
        default:
          return {
            case: "preExecResponse",
            value: create(PreExecResponseSchema, { sessionId: sid, reason: text(10) }),
          };
      }
    };
    const signed = (payload: Payload, messageId?: string) =>
      sealEnvelope(payload, {
        key: ACME.key,
        keyId: ACME.keyId,
        sender: "agent",
        clock,
        ...(messageId ? { messageId } : {}),
      });

    /** The frame that ends a connection's stream, and whether the daemon still owes an answer to it. */
    const fatal = (usedId: string): { bytes: Uint8Array; kind: string } => {
      const kind = [
        "random",
        "truncated",
        "oversize",
        "bitflip",
        "wrongkey",
        "replay",
        "zero",
        "garbage-body",
      ][int(8)]!;
      switch (kind) {
        case "random":
          return { bytes: bytes(1 + int(300)), kind };
        case "truncated": {
          const frame = encodeFrame(signed(refusable()));
          return { bytes: frame.subarray(0, 1 + int(frame.length - 1)), kind };
        }
        case "oversize": {
          const prefix = new Uint8Array(4 + int(64));
          new DataView(prefix.buffer).setUint32(0, 1024 * 1024 + 1 + int(2 ** 31), false);
          return { bytes: prefix, kind };
        }
        case "bitflip": {
          const frame = encodeFrame(signed(refusable()));
          const at = 4 + int(frame.length - 4); // the body: a flip in the prefix is "random"'s case
          frame[at]! ^= 1 << int(8);
          return { bytes: frame, kind };
        }
        case "wrongkey":
          return {
            bytes: encodeFrame(
              sealEnvelope(refusable(), { key: randomBytes(32), keyId: ACME.keyId, sender: "agent", clock }),
            ),
            kind,
          };
        case "replay":
          return { bytes: encodeFrame(signed(refusable(), usedId)), kind };
        case "zero":
          return { bytes: new Uint8Array(4), kind };
        default:
          return { bytes: encodeFrame(bytes(1 + int(200))), kind };
      }
    };

    const stats = { frames: 0, connections: 0, answered: 0, errors: 0, fatalAnswered: 0, closedOnly: 0 };
    const kinds = new Map<string, number>();

    /** One connection: its frames in a single write, then wait for the close. */
    const oneConnection = (): Promise<void> =>
      new Promise((resolve, reject) => {
        const ids: string[] = [];
        const parts: Uint8Array[] = [];
        for (let i = 0; i < PER_CONNECTION - 1; i++) {
          const body = signed(refusable());
          ids.push(decodeEnvelope(body).messageId);
          parts.push(encodeFrame(body));
        }
        const last = fatal(ids[int(ids.length)]!);
        kinds.set(last.kind, (kinds.get(last.kind) ?? 0) + 1);
        stats.frames += PER_CONNECTION;
        stats.connections++;
        const s = connect(socket);
        const decoder = new FrameDecoder();
        const answeredIds = new Set<string>();
        let unpaired = 0;
        let lastSent = false;
        const timer = setTimeout(
          () => reject(new Error(`seed ${SEED}: a connection was neither answered nor closed`)),
          20_000,
        );
        s.on("data", (chunk: Buffer) => {
          for (const body of decoder.push(chunk)) {
            const envelope = decodeEnvelope(body);
            if (envelope.payload.case !== "error") {
              reject(new Error(`seed ${SEED}: a refusable request got ${envelope.payload.case}`));
            }
            if (envelope.correlationId === "") unpaired++;
            else answeredIds.add(envelope.correlationId);
            // The bad frame goes once the refusable ones are answered: a bad length prefix fails the
            // decoder on the chunk that holds it, and whole frames before it in that chunk go with it
            // (FrameDecoder.push), so sent together they would never be read.
            if (answeredIds.size === ids.length && !lastSent) {
              lastSent = true;
              s.write(last.bytes);
              // Our side is done: a stream that ends mid-frame is cut here, every other one by the daemon.
              s.end();
            }
          }
        });
        s.on("error", () => undefined);
        s.on("close", () => {
          clearTimeout(timer);
          // Every refusable request was answered with an Error, then the bad frame with at most one.
          stats.answered += answeredIds.size;
          stats.errors += answeredIds.size + unpaired;
          if (unpaired > 0) stats.fatalAnswered++;
          else stats.closedOnly++;
          if (
            answeredIds.size !== ids.length ||
            unpaired > 1 ||
            [...answeredIds].some((id) => !ids.includes(id))
          ) {
            reject(
              new Error(
                `seed ${SEED}: ${answeredIds.size}/${ids.length} answered, ${unpaired} unpaired (${last.kind})`,
              ),
            );
          }
          resolve();
        });
        s.once("connect", () => s.write(Buffer.concat(parts)));
      });

    const started = performance.now();
    await Promise.all(
      Array.from({ length: PARALLEL }, async () => {
        while (stats.frames < FRAMES) await oneConnection();
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    fuzzing = false;
    await goodLoop;

    expect(exited, "the daemon died").toBe(false);
    expect(await head()).toEqual(before);
    expect(stats.frames).toBeGreaterThanOrEqual(FRAMES);
    expect(goodCalls).toBeGreaterThan(10);
    expect(good.closed).toBe(false);
    good.close();
    console.log(
      `[daemon-fuzz] seed ${SEED}: ${stats.frames} frames over ${stats.connections} connections in ${seconds.toFixed(1)} s; ` +
        `${stats.answered} refusable requests answered, ${stats.fatalAnswered} bad frames answered then closed, ${stats.closedOnly} closed; ` +
        `good client served ${goodCalls} times; last frames: ${JSON.stringify(Object.fromEntries(kinds))}`,
    );
  }, 180_000);
});
