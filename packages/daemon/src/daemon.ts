// startDaemon(): the Leash sidecar — the store opened and its chain verified, the engine, the Unix socket,
// the optional HTTP probes, and a clean shutdown. Decisions are the engine's; framing is the transport's.

import { readFileSync } from "node:fs";
import { type Checkpoint, parseEntryBody, type Signer, verifyChain } from "@leash/chain";
import type { ChainEntryRecord, Clock, Substrate } from "@leash/core";
import {
  createEngine,
  type Engine,
  findRollback,
  openStore,
  redactStoreUrl,
  rollbackMessage,
  systemClock,
} from "@leash/engine";
import {
  type CheckpointStore,
  compareSnapshots,
  describeDifferences,
  replayChain,
  stateCheckpointStore,
  storedParams,
} from "@leash/recovery";
import { DEFAULT_REPLAY_WINDOW_MS } from "@leash/wire";
import { type Logger, pino } from "pino";
import type { DaemonConfig } from "./config.js";
import { type ConsoleOptions, type ConsoleServer, listenConsole } from "./console/server.js";
import { checkGrpcOptions, type GrpcOptions, type GrpcTransport, listenGrpc } from "./grpc.js";
import { createRequestHandler, type RequestHandler } from "./handler.js";
import { HitlQueue } from "./hitl/queue.js";
import { type HttpEndpoint, listenHttp } from "./http.js";
import { createMetrics, type DaemonMetrics } from "./metrics.js";
import { OrganizationQuotaBook } from "./org-quotas.js";
import { PolicyFile, type ReloadResult } from "./policy-file.js";
import { defaultSocketPath } from "./socket-path.js";
import { TailFeed } from "./tail/feed.js";
import { TailReader } from "./tail/reader.js";
import { listenUnix, type UnixTransport } from "./unix-socket.js";

export interface DaemonOptions {
  readonly config: DaemonConfig;
  /** Signs every audit chain entry; it must be the chain's key in force. */
  readonly signer: Signer;
  /** Overrides config.store. */
  readonly store?: string;
  /** Default defaultSocketPath(). */
  readonly socketPath?: string;
  /** "HOST:PORT" for /healthz, /readyz and /metrics; none when absent. */
  readonly http?: string;
  /** Also serve the ShackleDaemon gRPC service (TLS/mTLS, or plaintext on loopback with insecure). */
  readonly grpc?: GrpcOptions;
  /** Default: pino JSON lines on stderr at "info". */
  readonly logger?: Logger;
  readonly clock?: Clock;
  /** Earlier keys trusted to have signed the chain before a key_rotation (hex); the signer's is always trusted. */
  readonly trustedPublicKeys?: readonly string[];
  /** Close on SIGTERM and SIGINT (the CLI sets it; a library caller usually handles its own signals). */
  readonly handleSignals?: boolean;
  /** Requests one connection may have in flight (default 256). */
  readonly maxInFlight?: number;
  /** Long polls (wait_hitl, tail_entries) one socket connection may hold open, apart (default 32). */
  readonly maxLongPolls?: number;
  /** Serve the HITL web console (operators with console tokens). */
  readonly console?: ConsoleOptions;
  /** Seconds a HITL request waits for a human when the policy sets no `hitl_timeout_s` (default 900). */
  readonly hitlTimeoutS?: number;
  /**
   * Where the daemon keeps, outside the store, the last chain head it signed (one checkpoint file per
   * store; `leash serve` defaults it to $XDG_STATE_HOME/leash). A store behind or forked from it (a
   * restored older copy) is refused at start. Without it (a library caller's choice) a rollback goes unseen.
   */
  readonly stateDir?: string;
  /**
   * An operator's policy file (@leash/policy; overrides config.policyFile): loaded before the store is
   * opened, reloaded on SIGHUP (with handleSignals) and when it changes (README: Policies).
   */
  readonly policyFile?: string;
  /** The operator's public key (64 hex): the policy file must then carry a verifying `FILE.sig`. */
  readonly policyPublicKey?: string;
}

export interface Daemon {
  /** The Unix socket's path. */
  readonly address: string;
  /** The HTTP endpoint's "host:port", when --http was given. */
  readonly httpAddress: string | null;
  /** The gRPC endpoint's "host:port", when grpc was given. */
  readonly grpcAddress: string | null;
  /** The console's URL (http://host:port/), when console was given. */
  readonly consoleUrl: string | null;
  /** The HITL desk: open requests, answers, waiting agents. */
  readonly hitl: HitlQueue;
  readonly engine: Engine;
  readonly handler: RequestHandler;
  readonly metrics: DaemonMetrics;
  /**
   * Reads the policy file again (what SIGHUP and a change on disk do): a file that loads replaces the
   * version in force whole; one that does not keeps it and says why. Null without a policy file.
   */
  reloadPolicy(): ReloadResult | null;
  /** Resolves once the daemon has shut down (after close(), or a signal). */
  readonly closed: Promise<void>;
  /** Stops accepting, finishes the requests in flight, closes the store, removes the socket file. */
  close(): Promise<void>;
}

/** Passes on forgetting a decided message id: at most this many times MESSAGES_PER_PASS rows a sweep. */
const MESSAGE_PASSES = 10;
const MESSAGES_PER_PASS = 10_000;

/**
 * Forgets decided message ids sent more than two replay windows ago. Any daemon refuses a copy of
 * such an envelope by its timestamp already (one window, on its own clock; the second absorbs up
 * to a window of skew between the cluster's clocks), so forgetting it never lets a request be
 * decided twice; it bounds the table to about two windows of decisions.
 */
async function forgetMessages(engine: Engine, clock: Clock): Promise<void> {
  const beforeNs = Math.trunc(clock.nowNs()) - 2 * DEFAULT_REPLAY_WINDOW_MS * 1_000_000;
  for (let pass = 0; pass < MESSAGE_PASSES; pass++) {
    if ((await engine.forgetMessages(beforeNs, MESSAGES_PER_PASS)) < MESSAGES_PER_PASS) return;
  }
}

/** This package's version, read from its package.json (works from src and dist). */
function daemonVersion(): string {
  try {
    const text = readFileSync(new URL("../package.json", import.meta.url), "utf8");
    return String((JSON.parse(text) as { version?: unknown }).version ?? "unknown");
  } catch {
    return "unknown";
  }
}

async function* wholeChain(substrate: Substrate): AsyncGenerator<ChainEntryRecord> {
  const batch = 5_000;
  for (let from = 0; ; from += batch) {
    const entries = await substrate.transaction((tx) => tx.chain.range(from, batch));
    yield* entries;
    if (entries.length < batch) return;
  }
}

/**
 * Verifies the store's chain and checks `signer` is the key that must sign its next entry; a daemon
 * that appended to a broken chain, or with another key, would make every later receipt worthless.
 */
async function checkChain(
  substrate: Substrate,
  signer: Signer,
  trusted: readonly string[],
  checkpoints: CheckpointStore | null,
): Promise<void> {
  let checkpoint: Checkpoint | null = null;
  if (checkpoints !== null) {
    checkpoint = await checkpoints.read();
    const rollback = checkpoint === null ? null : await findRollback(substrate, checkpoint);
    if (rollback !== null) throw new Error(rollbackMessage(rollback, checkpoints.location));
  }
  const result = await verifyChain(wholeChain(substrate), {
    publicKeys: [signer.publicKeyHex, ...trusted],
    ...(checkpoint === null ? {} : { checkpoint }),
  });
  if (!result.ok) {
    throw new Error(
      `the audit chain does not verify (${result.failure.kind} at seq ${result.failure.seq ?? "?"}): run \`leash verify\` and \`leash recover\``,
    );
  }
  // What was verified is the head to compare the next start with, before anything is served.
  if (checkpoints !== null && result.count > 0) {
    await checkpoints.write({ count: result.count, head_hash: result.head_hash });
  }
  const head = await substrate.transaction(async (tx) => {
    const h = await tx.chain.head();
    return h === null ? null : (await tx.chain.range(h.seq, 1))[0];
  });
  if (head === undefined || head === null) return;
  const body = parseEntryBody(head.body);
  if (typeof body === "string")
    throw new Error(`the audit chain's head (seq ${head.seq}) is unreadable: ${body}`);
  const inForce = body.kind === "key_rotation" ? String(body.data.next_key_id) : body.key_id;
  if (inForce !== signer.keyId) {
    throw new Error(
      `the signing key (key id ${signer.keyId}) is not the chain's key in force (key id ${inForce}): give that key, or hand over with \`leash key rotate\``,
    );
  }
}

/**
 * Replays the verified chain and compares the state tables with it: a daemon serving on a hand-edited
 * spent_usd or circuit flag would decide on a state its own chain contradicts (fail closed).
 */
async function checkStateTables(substrate: Substrate): Promise<void> {
  const replay = await replayChain(wholeChain(substrate), { params: storedParams(substrate) });
  if (!replay.ok) {
    const m = replay.mismatch!;
    throw new Error(
      `the audit chain does not replay: entry ${m.index} (seq ${m.seq}) records ${m.field} ${JSON.stringify(m.recorded)}, the entries before it give ${JSON.stringify(m.expected)}: run \`leash verify --replay\``,
    );
  }
  const differences = await compareSnapshots(substrate, replay.projection);
  if (differences.length > 0) {
    throw new Error(
      `the state tables disagree with the replayed chain: ${describeDifferences(differences)}: run \`leash recover --repair\``,
    );
  }
}

export async function startDaemon(options: DaemonOptions): Promise<Daemon> {
  const { config, signer } = options;
  const logger = options.logger ?? pino({ level: "info" }, pino.destination(2));
  const clock = options.clock ?? systemClock;
  const url = options.store ?? config.store;
  if (url === undefined) throw new Error("no store: give --store URL or `store:` in the daemon config");
  const socketPath = options.socketPath ?? defaultSocketPath();
  const metrics = createMetrics();
  // A refused gRPC set-up is refused before the store is opened.
  if (options.grpc !== undefined) checkGrpcOptions(options.grpc);

  const checkpoints = options.stateDir === undefined ? null : stateCheckpointStore(options.stateDir, url);
  // A policy file that does not load is refused before the store is opened.
  const policyPath = options.policyFile ?? config.policyFile;
  const policy =
    policyPath === undefined ? undefined : new PolicyFile(policyPath, logger, options.policyPublicKey);
  const substrate = await openStore(url);
  let engine: Engine | undefined;
  let transport: UnixTransport | undefined;
  let http: HttpEndpoint | undefined;
  let grpc: GrpcTransport | undefined;
  let consoleServer: ConsoleServer | undefined;
  let hitl: HitlQueue | undefined;
  let tailFeed: TailFeed | undefined;
  let sweeper: NodeJS.Timeout | undefined;
  const cleanup = async () => {
    clearInterval(sweeper);
    policy?.close();
    // Waiting agents are told first (they fail closed), so the transports' in-flight work can finish.
    hitl?.close();
    tailFeed?.close();
    await consoleServer?.close();
    await Promise.all([transport?.close(), grpc?.close()]);
    await http?.close();
    // The last head this daemon signed, for the next start to compare the store with.
    await engine
      ?.close()
      .catch((error: unknown) => logger.error({ err: error }, "writing the chain checkpoint failed"));
    await substrate.close().catch(() => undefined);
  };
  try {
    await checkChain(substrate, signer, options.trustedPublicKeys ?? [], checkpoints);
    await checkStateTables(substrate);
    engine = createEngine({
      substrate,
      signer,
      clock,
      reservationTtlMs: config.reservationTtlS * 1000,
      ...(checkpoints === null
        ? {}
        : {
            checkpointStore: checkpoints,
            onCheckpointError: (error: unknown) =>
              logger.error(
                { err: error, checkpoint: checkpoints.location },
                "writing the chain checkpoint failed",
              ),
          }),
      ...(policy === undefined ? {} : { policy }),
    });
    if (policy !== undefined) {
      policy.watch();
      logger.info({ policy_file: policy.path, policy_hash: policy.current().hash }, "policy loaded");
    }
    hitl = new HitlQueue({ engine, logger, nowNs: () => clock.nowNs() });
    const feed = new TailFeed({
      substrate,
      onError: (error) => logger.warn({ err: error }, "looking for new chain entries failed"),
    });
    tailFeed = feed;
    // An operator's answer (console) appends too: followers look at once.
    engine.onHitlEvent(() => feed.poke());
    const version = daemonVersion();
    const quotas = new OrganizationQuotaBook(config.limits.perOrganization, clock);
    const handler = createRequestHandler({
      engine,
      config,
      clock,
      logger,
      metrics,
      daemonVersion: version,
      hitl,
      tail: { reader: new TailReader(substrate), feed },
      quotas,
      ...(options.hitlTimeoutS === undefined ? {} : { hitlTimeoutS: options.hitlTimeoutS }),
    });
    transport = await listenUnix({
      path: socketPath,
      handler,
      config,
      quotas,
      limits: config.limits.socket,
      clock,
      logger,
      metrics,
      ...(options.maxInFlight === undefined ? {} : { maxInFlight: options.maxInFlight }),
      ...(options.maxLongPolls === undefined ? {} : { maxLongPolls: options.maxLongPolls }),
    });
    if (options.grpc !== undefined) {
      grpc = await listenGrpc({ ...options.grpc, handler, config, logger, quotas, metrics });
    }
    if (options.console !== undefined) {
      consoleServer = await listenConsole({
        ...options.console,
        hitl,
        logger,
        daemonVersion: version,
        nowNs: () => clock.nowNs(),
      });
    }
    let storeOpen = true;
    if (options.http !== undefined) {
      http = await listenHttp({
        listen: options.http,
        registry: metrics.registry,
        notReady: async () => {
          if (!storeOpen) return "the store is closed";
          try {
            await substrate.transaction((tx) => tx.chain.head());
            return null;
          } catch (error) {
            return `the store does not answer: ${error instanceof Error ? error.message : String(error)}`;
          }
        },
      });
    }
    // Holds whose agent never sent its postExec are charged at their estimate about every half TTL (at
    // most each 30 s): an ALLOWed call may have run.
    const sweepMs = Math.min(30_000, Math.max(100, (config.reservationTtlS * 1000) / 2));
    let sweeping = false;
    const live = engine;
    sweeper = setInterval(() => {
      if (sweeping) return;
      sweeping = true;
      Promise.all([
        live
          .expireReservations()
          .then((n) => n > 0 && logger.info({ expired: n }, "charged expired budget holds")),
        // Requests opened by another daemon on the same store have no timer here.
        hitl?.expireDue(),
        forgetMessages(live, clock),
      ])
        .catch((error: unknown) => logger.warn({ err: error }, "charging expired holds failed"))
        .finally(() => {
          sweeping = false;
        });
    }, sweepMs);
    sweeper.unref();

    let resolveClosed: () => void = () => undefined;
    const closed = new Promise<void>((resolve) => {
      resolveClosed = resolve;
    });
    let closing: Promise<void> | undefined;
    const onSignal = (signal: NodeJS.Signals) => {
      logger.info({ signal }, "shutting down");
      void daemon.close();
    };
    // SIGHUP reloads the policy file (validated first; a broken one keeps the version in force).
    const onReload = () => {
      policy?.reload();
    };
    const daemon: Daemon = {
      address: transport.path,
      httpAddress: http?.address ?? null,
      grpcAddress: grpc?.address ?? null,
      consoleUrl: consoleServer?.url ?? null,
      hitl,
      engine,
      handler,
      metrics,
      reloadPolicy: () => policy?.reload() ?? null,
      closed,
      close() {
        closing ??= (async () => {
          if (options.handleSignals) {
            process.off("SIGTERM", onSignal);
            process.off("SIGINT", onSignal);
            process.off("SIGHUP", onReload);
          }
          await cleanup();
          storeOpen = false;
          logger.info("daemon stopped");
          resolveClosed();
        })();
        return closing;
      },
    };
    if (options.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
      process.on("SIGHUP", onReload);
    }
    logger.info(
      {
        socket: transport.path,
        http: http?.address ?? null,
        grpc: grpc?.address ?? null,
        console: consoleServer?.url ?? null,
        store: redactStoreUrl(url),
        key_id: signer.keyId,
      },
      "daemon listening",
    );
    return daemon;
  } catch (error) {
    await cleanup();
    throw error;
  }
}
