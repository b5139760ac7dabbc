// `leash serve`: runs the sidecar daemon (@leash/daemon) on a Unix socket (and gRPC) until SIGTERM or SIGINT.
// The daemon is @leash/daemon's; this reads flags, the config file and the signing key, and prints where it listens.
import { readFileSync } from "node:fs";
import { loadPublicKey } from "@leash/chain";
import {
  ConsoleConfigError,
  type ConsoleOptions,
  checkGrpcOptions,
  DaemonConfigError,
  DEFAULT_ORGANIZATION_QUOTAS,
  DEFAULT_SOCKET_LIMITS,
  defaultSocketPath,
  GrpcConfigError,
  type GrpcOptions,
  isLoopback,
  loadConsoleTokens,
  loadDaemonConfig,
  PolicyFileError,
  parseHostPort,
  SocketInUseError,
  startDaemon,
} from "@leash/daemon";
import { PolicyError } from "@leash/policy";
import { defaultStateDir, stateCheckpointStore } from "@leash/recovery";
import type { Command } from "commander";
import { engineFailure } from "../context.js";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, firstLine, type Io } from "../io.js";
import { addKeyOptions, type KeyOptions, resolveSigner } from "../keys.js";
import { parseStoreUrl, resolveStoreUrl } from "../store.js";

export interface ServeOptions extends KeyOptions {
  readonly store?: string;
  /** An operator's policy file (overrides the config's `policy:`). */
  readonly policy?: string;
  /** The operator's public key file: the policy must be signed with it (`FILE.sig`). */
  readonly policyPubkey?: string;
  readonly config?: string;
  readonly socket?: string;
  readonly http?: string;
  readonly grpc?: string;
  readonly grpcInsecure?: boolean;
  readonly tlsCert?: string;
  readonly tlsKey?: string;
  readonly tlsClientCa?: string;
  readonly console?: string;
  readonly consoleTokens?: string;
  readonly consoleInsecure?: boolean;
  readonly hitlTimeout?: string;
  readonly stateDir?: string;
}

/** The console flags as daemon options: both or neither, the address and the tokens file checked first. */
function consoleOptionsOf(options: ServeOptions): ConsoleOptions | undefined {
  if (options.console === undefined) {
    if (options.consoleTokens !== undefined)
      throw new CliError("--console-tokens needs --console HOST:PORT", EXIT_BAD_INPUT);
    if (options.consoleInsecure === true)
      throw new CliError("--console-insecure needs --console HOST:PORT", EXIT_BAD_INPUT);
    return undefined;
  }
  if (options.consoleTokens === undefined) {
    throw new CliError(
      "--console needs --console-tokens FILE (operators' token hashes; see `leash console token add --help`)",
      EXIT_BAD_INPUT,
    );
  }
  let host: string;
  try {
    ({ host } = parseHostPort(options.console));
  } catch {
    throw new CliError(
      `--console wants HOST:PORT (e.g. 127.0.0.1:8788), not ${JSON.stringify(options.console)}`,
      EXIT_BAD_INPUT,
    );
  }
  if (!isLoopback(host) && options.consoleInsecure !== true) {
    throw new CliError(
      `--console ${options.console} is not a loopback address, and the console speaks plain HTTP (tokens and session cookies in the clear): listen on 127.0.0.1 behind a TLS reverse proxy, or give --console-insecure`,
      EXIT_BAD_INPUT,
    );
  }
  try {
    const tokens = loadConsoleTokens(options.consoleTokens);
    if (tokens.length === 0) throw new Error(`${options.consoleTokens} holds no tokens`);
    return {
      listen: options.console,
      tokens,
      ...(options.consoleInsecure === true ? { insecure: true } : {}),
    };
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_BAD_INPUT);
  }
}

function hitlTimeoutOf(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const seconds = Number(text);
  if (!/^[0-9]+(\.[0-9]+)?$/.test(text) || !(seconds > 0)) {
    throw new CliError(`--hitl-timeout wants seconds > 0, not ${JSON.stringify(text)}`, EXIT_BAD_INPUT);
  }
  return seconds;
}

function readPem(file: string, flag: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new CliError(`${flag} ${file}: ${firstLine(err)}`, EXIT_BAD_INPUT);
  }
}

/** The gRPC flags as daemon options; every refused combination is a one-line error before anything starts. */
function grpcOptionsOf(options: ServeOptions): GrpcOptions | undefined {
  const tlsGiven =
    options.tlsCert !== undefined || options.tlsKey !== undefined || options.tlsClientCa !== undefined;
  if (options.grpc === undefined) {
    if (options.grpcInsecure || tlsGiven)
      throw new CliError("--grpc-insecure and --tls-* need --grpc HOST:PORT", EXIT_BAD_INPUT);
    return undefined;
  }
  if (options.tlsCert !== undefined && options.tlsKey === undefined)
    throw new CliError("--tls-cert needs --tls-key (the certificate's private key)", EXIT_BAD_INPUT);
  if (options.tlsKey !== undefined && options.tlsCert === undefined)
    throw new CliError("--tls-key needs --tls-cert", EXIT_BAD_INPUT);
  if (options.tlsClientCa !== undefined && options.tlsCert === undefined)
    throw new CliError("--tls-client-ca needs --tls-cert and --tls-key", EXIT_BAD_INPUT);
  const grpc: GrpcOptions = {
    listen: options.grpc,
    ...(options.grpcInsecure ? { insecure: true } : {}),
    ...(options.tlsCert === undefined || options.tlsKey === undefined
      ? {}
      : {
          tls: {
            cert: readPem(options.tlsCert, "--tls-cert"),
            key: readPem(options.tlsKey, "--tls-key"),
            ...(options.tlsClientCa === undefined
              ? {}
              : { clientCa: readPem(options.tlsClientCa, "--tls-client-ca") }),
          },
        }),
  };
  try {
    checkGrpcOptions(grpc);
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_BAD_INPUT);
  }
  return grpc;
}

/** --policy-pubkey's key, checked: it needs a policy to check (--policy or the config's). */
function policyPublicKeyOf(
  options: ServeOptions,
  config: ReturnType<typeof loadDaemonConfig>,
): string | undefined {
  if (options.policyPubkey === undefined) return undefined;
  if (options.policy === undefined && config.policyFile === undefined) {
    throw new CliError(
      "--policy-pubkey needs a policy (--policy FILE or `policy:` in the config)",
      EXIT_BAD_INPUT,
    );
  }
  try {
    return loadPublicKey(options.policyPubkey).publicKeyHex;
  } catch (err) {
    throw new CliError(`--policy-pubkey: ${firstLine(err)}`, EXIT_BAD_INPUT, { cause: err });
  }
}

/** Why the daemon did not start, as the CLI's error: bad input (2), else the store or chain refused (1). */
function startFailure(err: unknown, url: string): Error {
  if (
    err instanceof SocketInUseError ||
    err instanceof DaemonConfigError ||
    err instanceof PolicyError ||
    err instanceof PolicyFileError ||
    err instanceof GrpcConfigError ||
    ConsoleConfigError.isInstance(err)
  ) {
    return new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
  const known = engineFailure(err, url);
  if (known !== undefined) return known;
  return new CliError(firstLine(err), EXIT_REFUSED, { cause: err });
}

export async function runServe(options: ServeOptions, io: Io): Promise<number> {
  if (options.config === undefined) {
    throw new CliError(
      "leash serve needs --config FILE: the organizations, their HMAC keys and policies (see `leash serve --help`)",
      EXIT_BAD_INPUT,
    );
  }
  let config: ReturnType<typeof loadDaemonConfig>;
  try {
    config = loadDaemonConfig(options.config);
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
  if (options.http !== undefined) {
    try {
      parseHostPort(options.http);
    } catch (err) {
      throw new CliError(firstLine(err), EXIT_BAD_INPUT);
    }
  }
  const grpc = grpcOptionsOf(options);
  const consoleOptions = consoleOptionsOf(options);
  const hitlTimeoutS = hitlTimeoutOf(options.hitlTimeout);
  const target = parseStoreUrl(resolveStoreUrl(options.store, io.env, config.store));
  const { signer } = resolveSigner(options, io);
  const stateDir = options.stateDir ?? defaultStateDir(io.env);
  try {
    stateCheckpointStore(stateDir, target.url);
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
  const socketPath = options.socket ?? defaultSocketPath(io.env);
  const policyPublicKey = policyPublicKeyOf(options, config);
  let daemon: Awaited<ReturnType<typeof startDaemon>>;
  try {
    daemon = await startDaemon({
      config,
      signer,
      store: target.url,
      socketPath,
      handleSignals: true,
      stateDir,
      ...(options.http === undefined ? {} : { http: options.http }),
      ...(grpc === undefined ? {} : { grpc }),
      ...(consoleOptions === undefined ? {} : { console: consoleOptions }),
      ...(hitlTimeoutS === undefined ? {} : { hitlTimeoutS }),
      ...(options.policy === undefined ? {} : { policyFile: options.policy }),
      ...(policyPublicKey === undefined ? {} : { policyPublicKey }),
    });
  } catch (err) {
    throw startFailure(err, target.url);
  }
  // One line for whoever started us (a supervisor, a test): where to connect and which key signs.
  io.stdout(
    `${JSON.stringify({ listening: daemon.address, http: daemon.httpAddress, grpc: daemon.grpcAddress, console: daemon.consoleUrl, store: target.label, public_key: signer.publicKeyHex })}\n`,
  );
  await daemon.closed;
  return 0;
}

/** The `limits:` block with its defaults, from the daemon's own numbers. */
function limitsHelp(): string {
  const l = DEFAULT_SOCKET_LIMITS;
  const q = DEFAULT_ORGANIZATION_QUOTAS;
  return `Limits (the config's \`limits:\` block; defaults shown): max_connections ${l.maxConnections} (at the
cap a new connection replaces the oldest never authenticated), auth_timeout_s ${l.authTimeoutMs / 1000},
idle_timeout_s ${l.idleTimeoutMs / 1000}, frame_timeout_s ${l.frameTimeoutMs / 1000} (a frame must arrive whole that long after its
first byte), max_buffered_bytes ${l.maxBufferedBytes} (partial frames across connections),
write_pause_bytes ${l.writePauseBytes} and write_close_bytes ${l.writeCloseBytes} (answers queued unread on one
connection: stop reading it, close it), max_queued_bytes ${l.maxQueuedBytes} (unread answers across
connections), max_in_flight ${l.maxInFlight} and max_long_polls ${l.maxLongPolls} per connection; per_organization:
{ in_flight: ${q.inFlight}, tails: ${q.tails}, replay_ids: ${q.replayIds}, rate_per_s: ${q.ratePerS}, burst: ${q.burst} }.
Each refusal is counted in leash_daemon_limit_refusals_total{limit} (/metrics). Run it with
NODE_OPTIONS=--max-semi-space-size=2 to keep garbage out of its RSS under load.`;
}

export function registerServe(program: Command, io: Io, setExit: (code: number) => void): void {
  addKeyOptions(
    program
      .command("serve")
      .description(
        "run the sidecar daemon: SP/1.0 on a Unix socket, every decision signed into the audit chain",
      )
      .option(
        "--store <url>",
        "where state lives: sqlite:PATH or postgres://USER@HOST/DB[?schema=NAME] (default: $LEASH_STORE, else the config file's store, else sqlite:./leash.db)",
      )
      .option(
        "--config <file>",
        "the daemon config (JSON or YAML): organizations, their HMAC keys and policies",
      )
      .option(
        "--socket <path>",
        "the Unix socket to listen on (default: $LEASH_SOCKET, else $XDG_RUNTIME_DIR/leash.sock, else /tmp/leash-$UID.sock)",
      )
      .option("--http <host:port>", "also serve /healthz, /readyz and /metrics (Prometheus) over HTTP")
      .option(
        "--grpc <host:port>",
        "also serve the ShackleDaemon gRPC service (needs --tls-cert/--tls-key, or --grpc-insecure on loopback)",
      )
      .option("--grpc-insecure", "plaintext gRPC, only on a loopback address (127.0.0.0/8, ::1, localhost)")
      .option("--tls-cert <file>", "the gRPC server's certificate chain (PEM)")
      .option("--tls-key <file>", "the gRPC server's private key (PEM)")
      .option(
        "--tls-client-ca <file>",
        "require client certificates from this CA (PEM): mTLS, the certificate names the organization",
      )
      .option("--console <host:port>", "also serve the HITL web console (HTTP + WebSocket /v1/control)")
      .option(
        "--policy <file>",
        "an operator's policy (YAML/JSON, see `leash policy check`): rules judged after SP/1.0's decide; reloaded on SIGHUP or change",
      )
      .option(
        "--policy-pubkey <file>",
        "require the policy file to be signed with this operator key (FILE.sig, made by `leash policy sign`)",
      )
      .option(
        "--console-tokens <file>",
        "the console's operators: JSON {tokens: [{sha256, operator, readonly, organizations}]} (make one with `leash console token add`)",
      )
      .option(
        "--console-insecure",
        "allow --console on a non-loopback address although it speaks plain HTTP (only behind a TLS proxy)",
      )
      .option(
        "--state-dir <dir>",
        "where the last chain head this daemon signed is kept, outside the store, one checkpoint file per store (default: $LEASH_STATE_DIR, else $XDG_STATE_HOME/leash, else ~/.local/state/leash)",
      )
      .option(
        "--hitl-timeout <seconds>",
        "how long a HITL request waits for a human before it is a DENY, when the policy sets no hitl_timeout_s (default 900)",
      ),
  )
    .addHelpText("after", serveHelp())
    .action(async (options: ServeOptions) => {
      setExit(await runServe(options, io));
    });
}

/** The text after `leash serve --help`'s options: an example, the socket, rollback, gRPC, console, limits, output. */
function serveHelp(): string {
  return `
Example:
  leash keygen --out ~/.config/leash/leash.key
  (umask 077; openssl rand -hex 32 > ~/.config/leash/acme-k1.hmac)   # acme's HMAC key, mode 0600
  cat > daemon.yaml <<YAML
  store: sqlite:./leash.db
  organizations:
    acme:
      hmac_keys: { k1: { file: $HOME/.config/leash/acme-k1.hmac } }
      default_guard: { budget_usd: 1 }
      agents:
        research-bot: { guard: { budget_usd: 0.5, max_repeat_calls: 3 } }
  YAML
  leash serve --config daemon.yaml --key-file ~/.config/leash/leash.key --socket /run/leash/leash.sock --http 127.0.0.1:9464

The socket is created with mode 0660 (the agents' group may connect). A socket file left by a killed
daemon is removed at start; if another daemon listens on it, serve refuses to start. The chain is
verified before the socket opens and the signing key must be its key in force. A daemon without a
signing key refuses to start unless --ephemeral-key. SIGTERM or SIGINT: stop accepting, finish the
requests in flight, close the store, remove the socket file.
Rollback: the last chain head the daemon signed is checkpointed in --state-dir as the chain grows
(about every 250 ms, and at shutdown); a store whose chain is behind it or forked from it (an older
copy restored) is refused at start, naming both heads. Restored on purpose? \`leash recover
--accept-rollback\` records that in a signed entry, and serve starts again.
gRPC: the organization is the client certificate's URI SAN leash:org:<id>, else its subject CN
(with --tls-client-ca); without client certificates, the only configured organization, or
(--grpc-insecure only) the leash-organization metadata.
Console: --console 127.0.0.1:8788 --console-tokens tokens.json serves the HITL console; operators sign
in with their token (the chain records the token's operator, never a typed name); a read-only token
sees the queue but cannot answer; a token sees and answers only the organizations it names. The
console speaks plain HTTP: on a non-loopback address serve refuses to start unless --console-insecure
(put a TLS reverse proxy in front).
${limitsHelp()}
Output: one JSON line on stdout once listening ({"listening", "http", "grpc", "console", "store", "public_key"}); logs
are JSON lines on stderr. Exit status: 0 after a clean shutdown, 1 the store or chain refused, 2 bad
flags, config, key or socket path.`;
}
