// Way 1 of the README: the MCP client config from a clone, run as an MCP client would run it (its
// command line, with /home/me replaced), in front of the real filesystem server fetched by npx.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "./helpers.js";
import { block, Newcomer } from "./readme-support.js";

const user = new Newcomer();
afterAll(() => user.cleanup());

interface ServerEntry {
  command: string;
  args: string[];
}

beforeAll(async () => {
  expect((await user.link()).code).toBe(0);
  for (const name of ["key", "mcp-policy"]) {
    const r = await user.bash(block(name).code);
    expect(r.code, `${name}: ${r.stderr}`).toBe(0);
  }
}, 120_000);

describe("guard an MCP server (README way 1)", () => {
  it("the documented config's command line serves the filesystem server's tools; a denied tool never runs", async () => {
    // The user's edit: /home/me/leash is the clone, /home/me the home.
    const text = block("mcp-client")
      .code.replaceAll("/home/me/leash", REPO_ROOT.replace(/\/$/, ""))
      .replaceAll("/home/me", user.home);
    const entry = (JSON.parse(text) as { mcpServers: Record<string, ServerEntry> }).mcpServers.notes!;
    writeFileSync(join(user.home, "notes", "todo.txt"), "buy milk\n");
    const transport = new StdioClientTransport({
      command: entry.command,
      args: entry.args,
      // What an MCP client passes: a PATH and a HOME.
      env: { PATH: process.env.PATH ?? "", HOME: user.home },
      stderr: "pipe",
    });
    let stderr = "";
    transport.stderr?.on("data", (chunk: Buffer) => {
      stderr += chunk.toString("utf8");
    });
    const client = new Client({ name: "readme-agent", version: "1.0.0" }, { capabilities: {} });
    try {
      await client.connect(transport);
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(["read_text_file", "move_file"]));

      const read = await client.callTool({
        name: "read_text_file",
        arguments: { path: join(user.home, "notes", "todo.txt") },
      });
      expect(read.isError ?? false, JSON.stringify(read)).toBe(false);
      expect(JSON.stringify(read.content)).toContain("buy milk");

      const moved = await client.callTool({
        name: "move_file",
        arguments: { source: join(user.home, "notes", "todo.txt"), destination: join(user.home, "gone.txt") },
      });
      expect(moved.isError).toBe(true);
      // The filesystem server's tools declare an outputSchema, so the decision rides in _meta.
      expect((moved._meta as Record<string, unknown> | undefined)?.["leash/decision"]).toMatchObject({
        verdict: "DENY",
        reason: "policy_violation:tool_denied",
      });
      // The server never saw it: the file is where it was.
      const again = await client.callTool({
        name: "read_text_file",
        arguments: { path: join(user.home, "notes", "todo.txt") },
      });
      expect(JSON.stringify(again.content)).toContain("buy milk");
    } catch (error) {
      throw new Error(`${(error as Error).message}\nleash mcp stderr: ${stderr}`);
    } finally {
      await client.close();
    }
    // Every decision is in the signed chain of the policy's store.
    const verified = await user.bash(
      `leash verify --store "sqlite:$HOME/.config/leash/mcp.db" --pubkey ~/.config/leash/leash.pub.hex`,
    );
    expect(verified.stdout, verified.stderr).toMatch(/^OK: \d+ entries verified/);
  }, 180_000);
});
