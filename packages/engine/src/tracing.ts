// OpenTelemetry spans around evaluate, postExec and resume, through @opentelemetry/api only: a no-op
// until the application installs an SDK. It records what the engine returned; it decides nothing.
import {
  type Attributes,
  type Context,
  context,
  propagation,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from "@opentelemetry/api";

/** The tracer name users filter on (and give to a sampler). */
export const TRACER_NAME = "@leash/engine";

/**
 * Span names. The evaluate span is `leash.evaluate {tool}`, not the GenAI conventions'
 * `execute_tool {tool}`: it wraps the decision taken before the tool runs, not the tool's run, and
 * an agent framework that traces its tools already emits `execute_tool` spans for those.
 * `gen_ai.operation.name` is still `execute_tool`, so GenAI views group the check with the call.
 */
export const SPAN_EVALUATE = "leash.evaluate";
export const SPAN_POST_EXEC = "leash.post_exec";
export const SPAN_RESUME = "leash.hitl_decision";

const carrierGetter = {
  get: (carrier: { traceparent: string }, key: string) =>
    key === "traceparent" ? carrier.traceparent : undefined,
  keys: () => ["traceparent"],
};

/**
 * The parent a span starts under: the W3C `traceparent` the caller passed (an MCP request's
 * `_meta.traceparent`), read by the globally registered propagator, else the active context. A
 * malformed one is ignored by the propagator, and the active context stays the parent.
 */
function parentOf(traceparent: unknown): Context {
  const active = context.active();
  if (typeof traceparent !== "string" || traceparent === "") return active;
  return propagation.extract(active, { traceparent }, carrierGetter);
}

/** One span of the engine's: attributes are built only when an SDK records the span. */
export interface EngineSpan {
  readonly recording: boolean;
  set(attributes: Attributes): void;
  /** Ends the span; an error is recorded on it (a DENY is an answer, not an error). */
  end(error?: unknown): void;
}

const NOT_RECORDING: EngineSpan = { recording: false, set() {}, end() {} };

/** Starts spans for one engine; `tracer` defaults to the global provider's (a no-op without an SDK). */
export class EngineTracing {
  readonly #tracer: Tracer;

  constructor(tracer?: Tracer) {
    this.#tracer = tracer ?? trace.getTracer(TRACER_NAME);
  }

  start(name: string, traceparent: unknown, attributes: () => Attributes): EngineSpan {
    const span = this.#tracer.startSpan(name, { kind: SpanKind.INTERNAL }, parentOf(traceparent));
    // Without an SDK the span is a NonRecordingSpan: nothing more is asked of it (the hot path).
    if (!span.isRecording()) {
      span.end();
      return NOT_RECORDING;
    }
    span.setAttributes(attributes());
    return recordingSpan(span);
  }
}

function recordingSpan(span: Span): EngineSpan {
  return {
    recording: true,
    set(attributes) {
      span.setAttributes(attributes);
    },
    end(error) {
      if (error !== undefined) {
        span.recordException(error instanceof Error ? error : String(error));
        span.setStatus({
          code: SpanStatusCode.ERROR,
          message: error instanceof Error ? error.message : String(error),
        });
        const code = (error as { code?: unknown }).code;
        if (typeof code === "string") span.setAttribute("error.type", code);
      }
      span.end();
    },
  };
}

/** The call id a span names: the caller's (a framework's tool call id) or the call's nonce. */
export function callIdOf(callId: unknown, nonce: unknown): string | undefined {
  if (typeof callId === "string" && callId !== "") return callId;
  if (typeof nonce === "string" || typeof nonce === "number") return String(nonce);
  return undefined;
}

/** Drops undefined and null values: OpenTelemetry attributes cannot carry them. */
export function defined(
  attributes: Record<string, string | number | boolean | null | undefined>,
): Attributes {
  const out: Attributes = {};
  for (const [key, value] of Object.entries(attributes))
    if (value !== undefined && value !== null) out[key] = value;
  return out;
}
