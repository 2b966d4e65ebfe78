// client.mjs drives "parley-grant mcp" with the official MCP TypeScript SDK
// client, a client nobody on this project wrote, at its default settings:
// every call goes through client.callTool with no options, so it gets the
// SDK's default request timeout (60 s), no progress token and no timeout
// reset on progress. It writes one JSON line per event to stdout; the Go test
// (mcp_test.go) approves what waits for a human and checks the lines. It
// asserts nothing itself.
//
// A request that waits for a human is followed as the tools document it:
// while a result has status "waiting", call parley_wait with its request id.
//
// Environment: PARLEY_GRANT (the binary), PARLEY_KEYD_SOCKET and
// PARLEY_AGENT_KEY (passed on to it), PARLEY_TEST_MODE ("all": every tool,
// the default; "slow": one request that a human approves after more than
// the client's default timeout; "documented": parley_status with the
// server started as docs/cli.md shows, from PARLEY_TEST_SOCKET and
// PARLEY_TEST_KEY), and for "all" PARLEY_TEST_SUBKEY (a
// sub-agent key), PARLEY_TEST_CONSENT and PARLEY_TEST_PROPOSALS (files with
// the service's consent_required ERROR frame and its PROPOSALS frame).
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const env = process.env;
const start = Date.now();
const out = (o) => process.stdout.write(JSON.stringify({ ...o, elapsed: Date.now() - start }) + "\n");

// In "documented" mode the server is started as docs/cli.md shows it for
// this SDK: the socket and the key in the arguments, and no env, so it
// gets only the SDK's default environment.
const transport = new StdioClientTransport(env.PARLEY_TEST_MODE === "documented"
  ? {
    command: env.PARLEY_GRANT,
    args: ["mcp", "--socket", env.PARLEY_TEST_SOCKET, "--key", env.PARLEY_TEST_KEY],
    stderr: "inherit",
  }
  : {
    command: env.PARLEY_GRANT,
    args: ["mcp"],
    env: { ...env },
    stderr: "inherit",
  });
const client = new Client({ name: "parley-ts-test", version: "1.0.0" });
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => out({ step: "log", data: n.params.data }));
await client.connect(transport);
out({ step: "server", info: client.getServerVersion(), instructions: client.getInstructions() ?? "" });
await client.setLoggingLevel("info");

// call calls one tool with the SDK's defaults. The SDK checks structured
// content against the tool's output schema; a failure there, or any
// protocol error (a timeout among them), is reported as protocolError.
async function call(step, name, args) {
  try {
    const res = await client.callTool({ name, arguments: args });
    out({
      step,
      tool: name,
      isError: Boolean(res.isError),
      text: res.content.map((c) => c.text ?? "").join(""),
      structured: res.structuredContent ?? null,
    });
    return res;
  } catch (e) {
    out({ step, tool: name, protocolError: String(e?.message ?? e) });
    return null;
  }
}

// decided calls a tool that may wait for a human, then parley_wait for as
// long as the result says the request still waits.
async function decided(step, name, args) {
  let res = await call(step, name, args);
  for (let i = 0; i < 20 && res?.structuredContent?.status === "waiting"; i++) {
    res = await call(step, "parley_wait", { request: res.structuredContent.request });
  }
  return res;
}

if (env.PARLEY_TEST_MODE === "documented") {
  await call("status", "parley_status", {});
  out({ step: "done" });
  await client.close();
  process.exit(0);
}

if (env.PARLEY_TEST_MODE === "slow") {
  await decided("slow", "parley_request_grant", { can: ["mail.read"] });
  out({ step: "done" });
  await client.close();
  process.exit(0);
}

const tools = await client.listTools();
out({
  step: "tools",
  names: tools.tools.map((t) => t.name).sort(),
  described: tools.tools.every((t) => (t.description ?? "").length > 80 && t.inputSchema && t.outputSchema),
});

await call("status", "parley_status", {});
const g = await call("grant", "parley_request_grant", {
  svc: ["shop.example"], can: ["shop.*"], per: "20.00USD", exp: "30m",
});
await call("refused", "parley_request_grant", { can: ["bank.*"] });
await call("bad-argument", "parley_request_grant", { exp: "soon" });
await call("unknown-tool", "parley_approve", {});
await call("after-unknown-tool", "parley_status", {});
await call("explain", "parley_explain", { can: ["bank.*"] });
await decided("approved", "parley_request_grant", { can: ["mail.read"] });
const att = await call("attenuate", "parley_attenuate", {
  token: g?.structuredContent?.token ?? "", to: env.PARLEY_TEST_SUBKEY, verbs: ["ASK"],
});
await call("inspect", "parley_inspect", { token: att?.structuredContent?.token ?? "" });
await call("proof", "parley_proof", { aud: "shop.example", verb: "ASK", target: "shop.status" });
// The consent frame as a JSON object, the proposals frame as the text the
// service sent: the tool takes either.
await decided("consent", "parley_request_consent", {
  service: "shop.example",
  consent: JSON.parse(readFileSync(env.PARLEY_TEST_CONSENT, "utf8")),
  proposal: readFileSync(env.PARLEY_TEST_PROPOSALS, "utf8"),
});
out({ step: "done" });
await client.close();
