// Drive the served app with the TypeScript MCP SDK (2025-11-25 tasks); print one JSON line per step.
// Usage: node mcp_client.mjs MCP_URL TOKEN OTHER_TOKEN (OTHER_TOKEN belongs to another owner).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, ElicitRequestSchema, McpError } from "@modelcontextprotocol/sdk/types.js";

const [url, token, otherToken] = process.argv.slice(2);
const emit = (step, fields) => console.log(JSON.stringify({ step, ...fields }));
const asked = [];

async function connect(secret) {
  const client = new Client({ name: "tasks-backend-tests", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params.message);
    return { action: "accept", content: { approved: true } };
  });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${secret}` } },
  });
  await client.connect(transport);
  return client;
}

// A tool call as a task, followed to its end: the kinds of messages seen, the last status, the result.
async function runTask(client, name, args, { stopAfterCreate = false } = {}) {
  const seen = [];
  let taskId;
  let last;
  let result;
  let error;
  const stream = client.experimental.tasks.callToolStream({ name, arguments: args }, undefined,
                                                          { task: { ttl: 60_000 } });
  for await (const message of stream) {
    seen.push(message.type);
    if (message.type === "taskCreated") taskId = message.task.taskId;
    if (message.type === "taskStatus") last = message.task.status;
    if (message.type === "result") result = message.result;
    if (message.type === "error") error = message.error.message;
    if (stopAfterCreate && taskId) break;
  }
  return { taskId, seen, last, result, error };
}

async function errorCode(call) {
  try {
    await call();
    return null;
  } catch (e) {
    return e instanceof McpError ? e.code : `${e.constructor.name}: ${e.message}`;
  }
}

const client = await connect(token);
const other = await connect(otherToken);
emit("initialize", { version: client.transport.protocolVersion, tasks: client.getServerCapabilities().tasks ?? null });

const tools = (await client.listTools()).tools;
emit("tools", { names: tools.map((t) => t.name), support: Object.fromEntries(
  tools.filter((t) => t.execution).map((t) => [t.name, t.execution.taskSupport])) });

const done = await runTask(client, "demo.sleep", { seconds: 0.2, steps: 2 });
emit("complete", { task_id: done.taskId, seen: done.seen, data: done.result?.structuredContent,
                   is_error: done.result?.isError ?? false, error: done.error });

const failed = await runTask(client, "demo.fail", { message: "boom" });
const failure = await client.experimental.tasks.getTaskResult(failed.taskId, CallToolResultSchema);
emit("failed", { streamed: failed.error, is_error: failure.isError, text: failure.content?.[0]?.text });

const running = await runTask(client, "demo.sleep", { seconds: 120, steps: 1200 }, { stopAfterCreate: true });
const cancelled = await client.experimental.tasks.cancelTask(running.taskId);
let final = cancelled.status;
for (const deadline = Date.now() + 30_000; !["completed", "failed", "cancelled"].includes(final);) {
  if (Date.now() > deadline) throw new Error("the cancelled task never finished");
  await new Promise((resolve) => setTimeout(resolve, 100));
  final = (await client.experimental.tasks.getTask(running.taskId)).status;
}
emit("cancel", { task_id: running.taskId, returned: cancelled.status, final });

const refund = await runTask(client, "demo.refund", { order_id: "T-3", amount: 2.25 });
emit("input", { task_id: refund.taskId, seen: refund.seen, asked, data: refund.result?.structuredContent,
                error: refund.error });

emit("ownership", {
  get: await errorCode(() => other.experimental.tasks.getTask(done.taskId)),
  cancel: await errorCode(() => other.experimental.tasks.cancelTask(refund.taskId)),
  result: await errorCode(() => other.experimental.tasks.getTaskResult(done.taskId, CallToolResultSchema)),
  listed: (await other.experimental.tasks.listTasks()).tasks.map((t) => t.taskId),
});

const listed = [];
let cursor;
do {
  const page = await client.experimental.tasks.listTasks(cursor);
  listed.push(...page.tasks.map((t) => t.taskId));
  cursor = page.nextCursor;
} while (cursor);
emit("list", { task_ids: listed });

await client.close();
await other.close();
