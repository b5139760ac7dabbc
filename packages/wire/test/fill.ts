// Test helper: a message of any schema with every field set to a non-default value, by reflection.
// Not a fixture generator for production; values are arbitrary but deterministic.

import { create, type DescField, type DescMessage, type MessageShape, ScalarType } from "@bufbuild/protobuf";

function scalar(type: ScalarType, seed: number): unknown {
  switch (type) {
    case ScalarType.STRING:
      return `s${seed}-ü€😀`;
    case ScalarType.BYTES:
      return new Uint8Array([seed & 0xff, 0, 255, 7]);
    case ScalarType.BOOL:
      return true;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return seed + 0.5;
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return -1234567890123456789n - BigInt(seed);
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return 18446744073709551615n - BigInt(seed);
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return -seed - 1;
    default:
      return seed + 1;
  }
}

function value(field: DescField, seed: number): unknown {
  switch (field.fieldKind) {
    case "scalar":
      return scalar(field.scalar, seed);
    case "enum":
      return field.enum.values[field.enum.values.length - 1]!.number;
    case "message":
      return fill(field.message, seed + 1);
    case "list":
      return field.listKind === "scalar" ? [scalar(field.scalar, seed), scalar(field.scalar, seed + 1)] : [];
    case "map": {
      const v = field.mapKind === "scalar" ? scalar(field.scalar, seed) : undefined;
      return { a: v, "k😀": v };
    }
  }
}

/** Every field set; for a oneof, the member named by `oneofCase` (default: the first). */
export function fill<Desc extends DescMessage>(
  schema: Desc,
  seed = 1,
  oneofCase?: string,
): MessageShape<Desc> {
  const init: Record<string, unknown> = {};
  for (const field of schema.fields) {
    if (field.oneof !== undefined) continue;
    init[field.localName] = value(field, seed + field.number);
  }
  for (const oneof of schema.oneofs) {
    const member = oneof.fields.find((f) => f.name === oneofCase) ?? oneof.fields[0]!;
    init[oneof.localName] = { case: member.localName, value: value(member, seed + member.number) };
  }
  return create(schema, init as never);
}
