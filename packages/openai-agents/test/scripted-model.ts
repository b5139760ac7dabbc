// A scripted Model for the Agents SDK's Runner: no network, no key. Not a mock of Leash or of the SDK:
// the SDK's real loop calls it, and it answers like a model stuck on one tool call.
import {
  type AgentInputItem,
  type Model,
  type ModelRequest,
  type ModelResponse,
  Usage,
} from "@openai/agents";

/** The tool results the model was sent, oldest first, as text. */
export const resultsIn = (input: ModelRequest["input"]): string[] =>
  (typeof input === "string" ? [] : input).flatMap((item: AgentInputItem) =>
    item.type === "function_call_result" ? [JSON.stringify(item.output)] : [],
  );

/** A Model that calls `toolName` with the same arguments until Leash's refusal is sent back, then answers. */
export class LoopingModel implements Model {
  readonly requests: ModelRequest[] = [];
  constructor(
    private readonly toolName: string,
    private readonly args: Record<string, unknown>,
  ) {}
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.requests.push(request);
    const turn = this.requests.length;
    const denied = resultsIn(request.input).some((r) => /Leash (denied|paused)/.test(r));
    return {
      usage: new Usage(),
      output: denied
        ? [
            {
              type: "message",
              role: "assistant",
              status: "completed",
              content: [{ type: "output_text", text: "Stopping: Leash denied the call." }],
            },
          ]
        : [
            {
              type: "function_call",
              callId: `call-${turn}`,
              name: this.toolName,
              arguments: JSON.stringify(this.args),
              status: "completed",
            },
          ],
    };
  }
  getStreamedResponse(): AsyncIterable<never> {
    throw new Error("the scripted model is not streamed in these tests");
  }
}
