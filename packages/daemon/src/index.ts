// @leash/daemon: the Leash sidecar (SHACKLE SP/1.0 Model B) — SP/1.0 envelopes on a Unix socket, decided by @leash/engine.
// Start it with startDaemon() or `leash serve`; agents connect with @leash/client (or any SP/1.0 client).

export { type AnswerTexts, answerFits, MAX_ID_BYTES, preExecAnswerBound } from "./answer-size.js";
export {
  type DaemonConfig,
  DaemonConfigError,
  keyMayActAs,
  loadDaemonConfig,
  type OrganizationConfig,
  parseDaemonConfig,
  policyFor,
} from "./config.js";
export { CONTROL_PATH, type ConsoleOptions, type ConsoleServer, listenConsole } from "./console/server.js";
export {
  addConsoleToken,
  ConsoleConfigError,
  type ConsoleToken,
  loadConsoleTokens,
  newConsoleToken,
  type Operator,
  operatorOf,
  parseConsoleTokens,
  tokenHash,
} from "./console/tokens.js";
export { type Daemon, type DaemonOptions, startDaemon } from "./daemon.js";
export {
  checkGrpcOptions,
  ERROR_CODE_METADATA,
  ERROR_DETAIL_METADATA,
  GrpcConfigError,
  type GrpcOptions,
  type GrpcTls,
  type GrpcTransport,
  isLoopback,
  listenGrpc,
  ORGANIZATION_METADATA,
  organizationOfCertificate,
  PROTOCOL_VERSION_METADATA,
  RETRY_AFTER_MS_METADATA,
  shackleServiceDefinition,
} from "./grpc.js";
export {
  type Answer,
  type AuthContext,
  createRequestHandler,
  guardConfigToWire,
  type HandlerOptions,
  hitlErrorPayload,
  MAX_TAILS,
  type RequestContext,
  type RequestHandler,
} from "./handler.js";
export { HitlError, type HitlErrorCode } from "./hitl/errors.js";
export { type HitlEventKind, type HitlListener, HitlQueue, type HitlQueueOptions } from "./hitl/queue.js";
export { type HttpEndpoint, listenHttp, parseHostPort } from "./http.js";
export {
  type DaemonLimits,
  DEFAULT_LIMITS,
  DEFAULT_ORGANIZATION_QUOTAS,
  DEFAULT_SOCKET_LIMITS,
  type OrganizationQuotas,
  type SocketLimits,
} from "./limits.js";
export { createMetrics, type DaemonMetrics } from "./metrics.js";
export {
  PolicyFile,
  PolicyFileError,
  type PolicyLogger,
  type ReloadResult,
  readPolicyFile,
} from "./policy-file.js";
export { looseSecretProblem } from "./secret-file.js";
export { defaultSocketPath } from "./socket-path.js";
export { DEFAULT_TAIL_POLL_MS, TailFeed, type TailFeedOptions, type TailWake } from "./tail/feed.js";
export { type TailFilter, type TailPage, TailReader, tailEventOf } from "./tail/reader.js";
export {
  DEFAULT_MAX_IN_FLIGHT,
  DEFAULT_MAX_LONG_POLLS,
  listenUnix,
  SocketInUseError,
  type UnixTransport,
} from "./unix-socket.js";
