// The ShackleDaemon gRPC service as @grpc/grpc-js wants it (paths, protobuf binary (de)serializers), and the
// metadata names Leash puts on calls: one definition for the daemon and its clients. No gRPC import, no I/O.
import { type DescMessage, fromBinary, type MessageShape, toBinary } from "@bufbuild/protobuf";
import { ShackleDaemon } from "./gen/shackle/sp1/shackle_pb.js";

/** The shape of one @grpc/grpc-js MethodDefinition (structural, so this package needs no gRPC dependency). */
export interface GrpcMethodDefinition {
  readonly path: string;
  readonly requestStream: false;
  /** True for WaitHitl, whose answers stream until the request is decided or expires. */
  readonly responseStream: boolean;
  readonly requestSerialize: (value: MessageShape<DescMessage>) => Buffer;
  readonly requestDeserialize: (bytes: Buffer) => MessageShape<DescMessage>;
  readonly responseSerialize: (value: MessageShape<DescMessage>) => Buffer;
  readonly responseDeserialize: (bytes: Buffer) => MessageShape<DescMessage>;
  readonly originalName: string;
}

/** The refusal's Appendix B code name (trailing metadata of a non-OK status). */
export const GRPC_ERROR_CODE_METADATA = "leash-error-code";
/** The refusal's detail (Appendix B table of the daemon's README). */
export const GRPC_ERROR_DETAIL_METADATA = "leash-error-detail";
/** Insecure loopback mode only: which configured organization the caller acts for. */
export const GRPC_ORGANIZATION_METADATA = "leash-organization";
/** The SP/1.0 version the client speaks (default 1.0.0); a Register negotiates from it. */
export const GRPC_PROTOCOL_VERSION_METADATA = "leash-protocol-version";

/**
 * `/shackle.sp1.ShackleDaemon/<Method>` for every method of the generated service, protobuf binary on the
 * wire. Pass it to `makeGenericClientConstructor` (a client) or `Server.addService` (a daemon).
 */
export function shackleGrpcService(): Record<string, GrpcMethodDefinition> {
  const definition: Record<string, GrpcMethodDefinition> = {};
  for (const method of ShackleDaemon.methods) {
    const input = method.input as DescMessage;
    const output = method.output as DescMessage;
    definition[method.name] = {
      path: `/${ShackleDaemon.typeName}/${method.name}`,
      requestStream: false,
      responseStream: method.methodKind === "server_streaming",
      requestSerialize: (value) => Buffer.from(toBinary(input, value)),
      requestDeserialize: (bytes) => fromBinary(input, bytes),
      responseSerialize: (value) => Buffer.from(toBinary(output, value)),
      responseDeserialize: (bytes) => fromBinary(output, bytes),
      originalName: method.localName,
    };
  }
  return definition;
}
