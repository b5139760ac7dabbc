// The proxy's pass-through handlers: every request and notification but tools/call goes to the other
// side as is (tools/list filtered by the policy's view). Deciding tools/call is proxy-call.ts's.
import {
  ListToolsRequestSchema,
  ListToolsResultSchema,
  ResultSchema,
  SetLevelRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { forwardOptions, gone, message, NO_TIMEOUT_MS, type ProxyContext } from "./proxy-context.js";

/** Registers the handlers that forward the agent's requests and notifications to the server. */
export function forwardAgentToServer(ctx: ProxyContext): void {
  const { server, client } = ctx;
  // Everything but tools/call (and what the SDK answers itself: initialize, ping) is forwarded as is.
  server.fallbackRequestHandler = async (request, extra) => {
    if (ctx.upstreamGone !== null) throw gone(ctx);
    return client.request(
      { method: request.method, params: request.params },
      ResultSchema,
      forwardOptions(ctx, extra, request),
    );
  };
  if (client.getServerCapabilities()?.logging) {
    // The SDK's Server would answer setLevel itself; the level is the real server's business.
    server.setRequestHandler(SetLevelRequestSchema, (request, extra) =>
      client.request(
        { method: request.method, params: request.params },
        ResultSchema,
        forwardOptions(ctx, extra, request),
      ),
    );
  }
  if (client.getServerCapabilities()?.tools) {
    server.setRequestHandler(ListToolsRequestSchema, async (request, extra) => {
      if (ctx.upstreamGone !== null) throw gone(ctx);
      const result = await client.request(
        { method: request.method, params: request.params },
        ListToolsResultSchema,
        forwardOptions(ctx, extra, request),
      );
      for (const tool of result.tools)
        if (tool.outputSchema !== undefined) ctx.withOutputSchema.add(tool.name);
      const view = ctx.policyView;
      return view === undefined
        ? result
        : { ...result, tools: result.tools.filter((t) => !view.hidden(t.name)) };
    });
  }
  server.fallbackNotificationHandler = async (notification) => {
    await client
      .notification(notification)
      .catch((error) => ctx.log(`notification to the server lost: ${message(error)}`));
  };
}

/** Registers the handlers that forward the server's requests and notifications to the agent. */
export function forwardServerToAgent(ctx: ProxyContext): void {
  const { server, client } = ctx;
  client.fallbackRequestHandler = async (request, extra) =>
    server.request({ method: request.method, params: request.params }, ResultSchema, {
      signal: extra.signal,
      timeout: NO_TIMEOUT_MS,
    });
  client.fallbackNotificationHandler = async (notification) => {
    await server
      .notification(notification)
      .catch((error) => ctx.log(`notification to the agent lost: ${message(error)}`));
  };
}
