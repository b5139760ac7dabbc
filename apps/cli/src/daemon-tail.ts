// `leash tail --daemon ADDR`: the same lines as `leash tail --store`, read through a running daemon's
// TailEntries (gRPC) or tail_entries (socket) with @leash/client. Flags and printing only; no store here.
import { readFileSync } from "node:fs";
import { type Client, createClient, type GrpcTarget, type TailEntry } from "@leash/client";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, firstLine } from "./io.js";

/** The daemon-mode flags of `leash tail`. */
export interface DaemonTailFlags {
  readonly daemon?: string;
  readonly org?: string;
  readonly hmacKeyFile?: string;
  readonly hmacKeyId?: string;
  readonly tlsCa?: string;
  readonly tlsCert?: string;
  readonly tlsKey?: string;
  readonly tlsServerName?: string;
  readonly grpcInsecure?: boolean;
}

/** HOST:PORT (or [v6]:PORT) is a gRPC address; anything else (a path) is the daemon's Unix socket. */
export function isGrpcAddress(address: string): boolean {
  return /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/.test(address);
}

const SOCKET_ONLY = [
  ["--hmac-key-file", "hmacKeyFile"],
  ["--hmac-key-id", "hmacKeyId"],
] as const;
const GRPC_ONLY = [
  ["--tls-ca", "tlsCa"],
  ["--tls-cert", "tlsCert"],
  ["--tls-key", "tlsKey"],
  ["--tls-server-name", "tlsServerName"],
  ["--grpc-insecure", "grpcInsecure"],
] as const;

function readFlagFile(flag: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new CliError(`${flag} ${path}: ${firstLine(err)}`, EXIT_BAD_INPUT, { cause: err });
  }
}

/** Checks the daemon flags' combination (before anything connects); a bad one is a one-line error. */
export function checkDaemonFlags(flags: DaemonTailFlags): void {
  if (flags.daemon === undefined) {
    const given = [["--org", "org"] as const, ...SOCKET_ONLY, ...GRPC_ONLY].find(
      ([, k]) => flags[k] !== undefined,
    );
    if (given !== undefined) throw new CliError(`${given[0]} applies only with --daemon`, EXIT_BAD_INPUT);
    return;
  }
  if (flags.org === undefined)
    throw new CliError("--daemon needs --org (your organization id)", EXIT_BAD_INPUT);
  const grpc = isGrpcAddress(flags.daemon);
  const wrong = (grpc ? SOCKET_ONLY : GRPC_ONLY).find(([, k]) => flags[k] !== undefined);
  if (wrong !== undefined) {
    throw new CliError(
      `${wrong[0]} applies to a ${grpc ? "Unix socket" : "gRPC HOST:PORT"} --daemon, not ${JSON.stringify(flags.daemon)}`,
      EXIT_BAD_INPUT,
    );
  }
  if (!grpc && flags.hmacKeyFile === undefined)
    throw new CliError("--daemon SOCKET needs --hmac-key-file (the organization's key)", EXIT_BAD_INPUT);
  if (
    grpc &&
    flags.grpcInsecure === true &&
    [flags.tlsCa, flags.tlsCert, flags.tlsKey].some((v) => v !== undefined)
  )
    throw new CliError("--grpc-insecure and --tls-* exclude each other", EXIT_BAD_INPUT);
  if ((flags.tlsCert === undefined) !== (flags.tlsKey === undefined))
    throw new CliError("--tls-cert and --tls-key go together", EXIT_BAD_INPUT);
}

/** A client for the flags (checked by checkDaemonFlags); its own refusals are bad input. */
export function daemonClient(flags: DaemonTailFlags): Client {
  const address = flags.daemon as string;
  let target: { socketPath: string; hmacKey: string; keyId: string } | { grpc: GrpcTarget };
  if (isGrpcAddress(address)) {
    const tls =
      flags.grpcInsecure === true
        ? (false as const)
        : {
            ...(flags.tlsCa === undefined ? {} : { ca: readFlagFile("--tls-ca", flags.tlsCa) }),
            ...(flags.tlsCert === undefined ? {} : { cert: readFlagFile("--tls-cert", flags.tlsCert) }),
            ...(flags.tlsKey === undefined ? {} : { key: readFlagFile("--tls-key", flags.tlsKey) }),
          };
    target = {
      grpc: {
        address,
        tls,
        ...(flags.tlsServerName === undefined ? {} : { serverName: flags.tlsServerName }),
      },
    };
  } else {
    const key = readFlagFile("--hmac-key-file", flags.hmacKeyFile as string)
      .toString("utf8")
      .trim();
    target = { socketPath: address, hmacKey: key, keyId: flags.hmacKeyId ?? "" };
  }
  try {
    return createClient({
      ...target,
      organizationId: flags.org as string,
      agentId: "leash-tail",
      heartbeatIntervalMs: 0,
      controlTimeoutMs: 5000,
    });
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
}

/** The daemon's failure (unreachable, refused, an answer that does not fit) as one line, exit 1. */
export function daemonFailure(err: unknown, address: string): CliError {
  const code = typeof err === "object" && err !== null && "code" in err ? ` (${String(err.code)})` : "";
  return new CliError(`the daemon at ${address}: ${firstLine(err)}${code}`, EXIT_REFUSED, { cause: err });
}

/** The time column exactly as `tail --store` prints it from the same entry. */
export function isoTimeOf(entry: TailEntry): string {
  return new Date(Math.floor(Number(entry.time_ns) / 1e6)).toISOString();
}
