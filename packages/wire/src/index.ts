// @leash/wire: the SP/1.0 messages (generated from proto/shackle/sp1/shackle.proto) and the socket framing.
// No socket, no daemon, no decisions: @leash/daemon and @leash/client are built on it.

export { PendingRequests } from "./correlation.js";
export {
  admitEnvelope,
  errorPayload,
  isMessageId,
  newMessageId,
  type OpenOptions,
  openEnvelope,
  type Payload,
  type SealOptions,
  type Sender,
  sealEnvelope,
  sealFrame,
} from "./envelope.js";
export {
  APPENDIX_B_ERROR_CODES,
  type AppendixBErrorCode,
  errorCodeName,
  WIRE_ERROR_CODES,
  WireError,
  type WireErrorCode,
} from "./errors.js";
export {
  decodeEnvelope,
  encodeEnvelope,
  encodeFrame,
  FRAME_PREFIX_BYTES,
  FrameDecoder,
  MAX_FRAME_BYTES,
  prefixFrame,
} from "./framing.js";
export * from "./gen/shackle/sp1/shackle_pb.js";
export {
  GRPC_ERROR_CODE_METADATA,
  GRPC_ERROR_DETAIL_METADATA,
  GRPC_ORGANIZATION_METADATA,
  GRPC_PROTOCOL_VERSION_METADATA,
  type GrpcMethodDefinition,
  shackleGrpcService,
} from "./grpc-service.js";
export {
  checkEnvelopeHmac,
  HMAC_BYTES,
  HMAC_FIELD,
  MIN_KEY_BYTES,
  signEnvelope,
  signedEnvelopeBytes,
  splitHmac,
  verifyEnvelopeHmac,
} from "./hmac.js";
export { isMoneyDecimal, MAX_DECIMAL_LENGTH, moneyFromWire, moneyToWire } from "./money.js";
export { digestToHex, paramsDigest, paramsFromJson, paramsToJson } from "./params.js";
export { denyReasonFor, verdictFromWire, verdictToWire } from "./reasons.js";
export {
  DEFAULT_REPLAY_CAPACITY,
  DEFAULT_REPLAY_WINDOW_MS,
  ReplayWindow,
  type ReplayWindowOptions,
} from "./replay.js";
export {
  negotiateProtocolVersion,
  PROTOCOL_VERSION,
  type ProtocolVersion,
  parseProtocolVersion,
  requireSupportedVersion,
  SUPPORTED_PROTOCOL_VERSIONS,
} from "./version.js";
