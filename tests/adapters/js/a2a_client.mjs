// Drive the served app with @a2a-js/sdk over A2A 1.0 JSON-RPC; print one JSON line per step.
// Usage: node a2a_client.mjs BASE_URL TOKEN OTHER_TOKEN (OTHER_TOKEN belongs to another owner).
import { randomUUID } from "node:crypto";

import { Role, TaskState } from "@a2a-js/sdk";
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
} from "@a2a-js/sdk/client";
import { TaskNotCancelableError, TaskNotFoundError } from "@a2a-js/sdk/errors";

const [base, token, otherToken] = process.argv.slice(2);

const emit = (step, fields) => console.log(JSON.stringify({ step, ...fields }));
const stateName = (task) => TaskState[task.status.state];
const dataParts = (parts) => parts.filter((p) => p.content?.$case === "data").map((p) => p.content.value);

function withToken(secret) {
  return (input, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set("Authorization", `Bearer ${secret}`);
    return fetch(input, { ...init, headers });
  };
}

async function connect(secret) {
  const fetchImpl = withToken(secret);
  const options = ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
  });
  return new ClientFactory(options).createFromUrl(base);
}

function request(data, { taskId = "", returnImmediately = false } = {}) {
  const message = {
    messageId: randomUUID(), contextId: "", taskId, role: Role.ROLE_USER,
    parts: [{ content: { $case: "data", value: data }, metadata: undefined, filename: "", mediaType: "" }],
    metadata: undefined, extensions: [], referenceTaskIds: [],
  };
  const configuration = { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately };
  return { tenant: "", message, configuration, metadata: undefined };
}

async function send(client, data, options) {
  const task = await client.sendMessage(request(data, options));
  if (!("status" in task)) throw new Error(`expected a task, got ${JSON.stringify(task)}`);
  return task;
}

async function settle(client, id) {
  for (const deadline = Date.now() + 30_000; Date.now() < deadline;) {
    const task = await client.getTask({ tenant: "", id });
    if (["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"].includes(stateName(task))) return task;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`task ${id} did not finish`);
}

async function errorName(call) {
  try {
    await call();
    return null;
  } catch (error) {
    if (error instanceof TaskNotFoundError) return "TaskNotFoundError";
    if (error instanceof TaskNotCancelableError) return "TaskNotCancelableError";
    return `${error.constructor.name}: ${error.message}`;
  }
}

const client = await connect(token);
const other = await connect(otherToken);

const card = await client.getAgentCard();
emit("card", { skills: card.skills.map((s) => s.id), streaming: card.capabilities?.streaming });

const done = await send(client, { operation: "demo.sleep", params: { seconds: 0.2, steps: 2 } });
emit("complete", { task_id: done.id, state: stateName(done), data: dataParts(done.artifacts[0].parts)[0] });

const events = [];
let streamed;
for await (const event of client.sendMessageStream(request({ operation: "demo.export", params: { rows: 3 } }))) {
  const payload = event.payload ?? event;
  events.push(payload.$case ?? Object.keys(payload)[0]);
  if (payload.$case === "statusUpdate") streamed = TaskState[payload.value.status.state];
  // A job that finished before the stream opened arrives whole: its task already holds the artifact.
  if (payload.$case === "task" && payload.value.artifacts?.length) {
    events.push("taskArtifact");
    streamed = TaskState[payload.value.status.state];
  }
}
emit("stream", { events, final: streamed });

const running = await send(client, { operation: "demo.sleep", params: { seconds: 120, steps: 1200 } },
                           { returnImmediately: true });
const cancelled = await client.cancelTask({ tenant: "", id: running.id, metadata: undefined });
const settled = await settle(client, running.id);
const again = await errorName(() => client.cancelTask({ tenant: "", id: running.id, metadata: undefined }));
emit("cancel", { task_id: running.id, returned: stateName(cancelled), final: stateName(settled), again });

const parked = await send(client, { operation: "demo.refund", params: { order_id: "J-1", amount: 7.5 } });
const asked = dataParts(parked.status.message.parts).find((d) => d.inputRequests)?.inputRequests ?? {};
const answered = await send(client, { inputResponses: { approval: { approved: true } } }, { taskId: parked.id });
emit("input", {
  task_id: parked.id, parked: stateName(parked), keys: Object.keys(asked),
  state: stateName(answered), data: dataParts(answered.artifacts[0].parts)[0],
});

emit("ownership", {
  get: await errorName(() => other.getTask({ tenant: "", id: done.id })),
  cancel: await errorName(() => other.cancelTask({ tenant: "", id: running.id, metadata: undefined })),
  listed: (await other.listTasks({ tenant: "", contextId: "", status: TaskState.TASK_STATE_UNSPECIFIED,
                                   pageToken: "", statusTimestampAfter: undefined })).tasks.map((t) => t.id),
});

const page = await client.listTasks({ tenant: "", contextId: "", status: TaskState.TASK_STATE_UNSPECIFIED,
                                      pageSize: 2, pageToken: "", statusTimestampAfter: undefined });
emit("list", { ids: page.tasks.map((t) => t.id), total: page.totalSize, next: page.nextPageToken,
               size: page.pageSize });
