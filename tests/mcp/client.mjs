// Drives an MCP server (through idem) with the official TypeScript SDK
// (@modelcontextprotocol/sdk 1.x, session era: initialize + Mcp-Session-Id).
// Usage: node client.mjs URL STEP...   STEP: call:TOOL:ARGS_JSON | list
// Prints one JSON line: the session id before and after the steps, and one entry per
// step, so the Rust test asserts on what the SDK returned.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, ...steps] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client({ name: "idem-test", version: "1.0.0" });
await client.connect(transport);
const sessionBefore = transport.sessionId;
const out = [];
for (const step of steps) {
  if (step === "list") {
    const { tools } = await client.listTools();
    out.push({
      tools: Object.fromEntries(
        tools.map((t) => [t.name, { description: t.description, idempotentHint: t.annotations?.idempotentHint ?? null }]),
      ),
    });
    continue;
  }
  const [, tool, ...rest] = step.split(":");
  const progress = [];
  const result = await client.callTool(
    { name: tool, arguments: JSON.parse(rest.join(":")) },
    undefined,
    { onprogress: (p) => progress.push(p.progress) },
  );
  out.push({
    isError: Boolean(result.isError),
    text: result.content.map((c) => c.text ?? "").join(""),
    structured: result.structuredContent ?? null,
    progress,
  });
}
const sessionAfter = transport.sessionId;
await transport.terminateSession().catch(() => {});
await client.close();
console.log(JSON.stringify({ sessionBefore, sessionAfter, steps: out }));
