// startDaemon(): the Leash sidecar — the store opened and its chain verified, the engine, the Unix socket,
// the optional HTTP probes, and a clean shutdown. Decisions are the engine's; framing is the transport's.

import { readFileSync } from "node:fs";
import type { Signer } from "@leash/chain";
import type { Clock, Substrate } from "@leash/core";
import { createEngine, type Engine, openStore, redactStoreUrl, systemClock } from "@leash/engine";
import { type CheckpointStore, stateCheckpointStore } from "@leash/recovery";
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
import { checkChain, checkStateTables } from "./startup-checks.js";
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

/** What startDaemon has started so far: stopAll stops each, in order. */
interface Started {
  engine?: Engine;
  transport?: UnixTransport;
  http?: HttpEndpoint;
  grpc?: GrpcTransport;
  consoleServer?: ConsoleServer;
  hitl?: HitlQueue;
  tailFeed?: TailFeed;
  sweeper?: NodeJS.Timeout;
  /** False once the daemon closed the store: /readyz says so. */
  storeOpen: boolean;
}

async function stopAll(
  started: Started,
  policy: PolicyFile | undefined,
  substrate: Substrate,
  logger: Logger,
): Promise<void> {
  clearInterval(started.sweeper);
  policy?.close();
  // Waiting agents are told first (they fail closed), so the transports' in-flight work can finish.
  started.hitl?.close();
  started.tailFeed?.close();
  await started.consoleServer?.close();
  await Promise.all([started.transport?.close(), started.grpc?.close()]);
  await started.http?.close();
  // The last head this daemon signed, for the next start to compare the store with.
  await started.engine
    ?.close()
    .catch((error: unknown) => logger.error({ err: error }, "writing the chain checkpoint failed"));
  await substrate.close().catch(() => undefined);
}

/** What startDaemon resolved from its options before the store was opened. */
interface DaemonScope {
  readonly options: DaemonOptions;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly metrics: DaemonMetrics;
  readonly substrate: Substrate;
  readonly checkpoints: CheckpointStore | null;
  readonly policy: PolicyFile | undefined;
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
  const scope: DaemonScope = { options, logger, clock, metrics, substrate, checkpoints, policy };
  const started: Started = { storeOpen: true };
  const cleanup = () => stopAll(started, policy, substrate, logger);
  try {
    await checkChain(substrate, signer, options.trustedPublicKeys ?? [], checkpoints);
    await checkStateTables(substrate);
    const engine = buildEngine(scope);
    started.engine = engine;
    if (policy !== undefined) {
      policy.watch();
      logger.info({ policy_file: policy.path, policy_hash: policy.current().hash }, "policy loaded");
    }
    const hitl = new HitlQueue({ engine, logger, nowNs: () => clock.nowNs() });
    started.hitl = hitl;
    const feed = new TailFeed({
      substrate,
      onError: (error) => logger.warn({ err: error }, "looking for new chain entries failed"),
    });
    started.tailFeed = feed;
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
    const transport = await startListeners(scope, started, { socketPath, handler, quotas, hitl, version });
    started.sweeper = startSweeper(scope, engine, hitl);
    const daemon = daemonHandle(scope, started, { engine, hitl, handler, transport, cleanup });
    logger.info(
      {
        socket: transport.path,
        http: started.http?.address ?? null,
        grpc: started.grpc?.address ?? null,
        console: started.consoleServer?.url ?? null,
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

function buildEngine({ options, substrate, clock, checkpoints, policy, logger }: DaemonScope): Engine {
  return createEngine({
    substrate,
    signer: options.signer,
    clock,
    reservationTtlMs: options.config.reservationTtlS * 1000,
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
}

/** The Unix socket, then (as asked for) gRPC, the console and the HTTP probes; each recorded in `started`. */
async function startListeners(
  scope: DaemonScope,
  started: Started,
  parts: {
    readonly socketPath: string;
    readonly handler: RequestHandler;
    readonly quotas: OrganizationQuotaBook;
    readonly hitl: HitlQueue;
    readonly version: string;
  },
): Promise<UnixTransport> {
  const { options, logger, clock, metrics, substrate } = scope;
  const { config } = options;
  const { handler, quotas } = parts;
  const transport = await listenUnix({
    path: parts.socketPath,
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
  started.transport = transport;
  if (options.grpc !== undefined) {
    started.grpc = await listenGrpc({ ...options.grpc, handler, config, logger, quotas, metrics });
  }
  if (options.console !== undefined) {
    started.consoleServer = await listenConsole({
      ...options.console,
      hitl: parts.hitl,
      logger,
      daemonVersion: parts.version,
      nowNs: () => clock.nowNs(),
    });
  }
  if (options.http !== undefined) {
    started.http = await listenHttp({
      listen: options.http,
      registry: metrics.registry,
      notReady: async () => {
        if (!started.storeOpen) return "the store is closed";
        try {
          await substrate.transaction((tx) => tx.chain.head());
          return null;
        } catch (error) {
          return `the store does not answer: ${error instanceof Error ? error.message : String(error)}`;
        }
      },
    });
  }
  return transport;
}

/**
 * Holds whose agent never sent its postExec are charged at their estimate about every half TTL (at
 * most each 30 s): an ALLOWed call may have run.
 */
function startSweeper(
  { options, clock, logger }: DaemonScope,
  engine: Engine,
  hitl: HitlQueue,
): NodeJS.Timeout {
  const sweepMs = Math.min(30_000, Math.max(100, (options.config.reservationTtlS * 1000) / 2));
  let sweeping = false;
  const sweeper = setInterval(() => {
    if (sweeping) return;
    sweeping = true;
    Promise.all([
      engine
        .expireReservations()
        .then((n) => n > 0 && logger.info({ expired: n }, "charged expired budget holds")),
      // Requests opened by another daemon on the same store have no timer here.
      hitl.expireDue(),
      forgetMessages(engine, clock),
    ])
      .catch((error: unknown) => logger.warn({ err: error }, "charging expired holds failed"))
      .finally(() => {
        sweeping = false;
      });
  }, sweepMs);
  sweeper.unref();
  return sweeper;
}

/** The running daemon as its caller holds it; with handleSignals, SIGTERM/SIGINT close it and SIGHUP reloads. */
function daemonHandle(
  { options, logger, metrics, policy }: DaemonScope,
  started: Started,
  parts: {
    readonly engine: Engine;
    readonly hitl: HitlQueue;
    readonly handler: RequestHandler;
    readonly transport: UnixTransport;
    readonly cleanup: () => Promise<void>;
  },
): Daemon {
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
    address: parts.transport.path,
    httpAddress: started.http?.address ?? null,
    grpcAddress: started.grpc?.address ?? null,
    consoleUrl: started.consoleServer?.url ?? null,
    hitl: parts.hitl,
    engine: parts.engine,
    handler: parts.handler,
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
        await parts.cleanup();
        started.storeOpen = false;
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
  return daemon;
}
