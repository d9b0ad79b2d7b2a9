// Drives the server with AG-UI's own client (`HttpAgent` of `@ag-ui/client`, which verifies the
// event order as it applies events), and prints what the agent ended up with, as JSON.
//
//   node ag_ui.mjs <server url> <scenario> <thread id> [agent type]
//
// run           one run of a new thread
// cut-resume    the run's connection is cut after some events; a second run follows the
//               thread from the last sequence the client saw (forwardedProps.fromSequence)
// interrupts    the run ends with interrupts (a client tool, an approval); the next run
//               answers them with `resume` entries
import { HttpAgent } from "@ag-ui/client";

const [base, scenario, threadId, agentType = "boss"] = process.argv.slice(2);

function cuttingFetch(events) {
  let cut = false;
  return async (url, init) => {
    const response = await fetch(url, init);
    if (cut || !response.body) return response;
    cut = true;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const encoder = new TextEncoder();
    let buffer = "";
    let sent = 0;
    const body = new ReadableStream({
      async pull(controller) {
        const { done, value } = await reader.read();
        if (done) { controller.close(); return; }
        buffer += decoder.decode(value, { stream: true });
        let at;
        while ((at = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, at + 2);
          buffer = buffer.slice(at + 2);
          controller.enqueue(encoder.encode(event));
          if (++sent === events) {
            await reader.cancel();
            controller.error(new TypeError("network error: connection cut"));
            return;
          }
        }
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
}

// The cut also rejects the client's internal read of the body: that is the cut, not a failure.
const stray = [];
process.on("unhandledRejection", (error) => stray.push(String(error?.message ?? error)));
console.error = () => {};

const agent = new HttpAgent({
  url: `${base}/ag-ui/${agentType}`,
  threadId,
  fetch: scenario === "cut-resume" ? cuttingFetch(25) : undefined,
});
let sequence = 0;
const types = [];
const subagents = [];
let finished = null;
agent.subscribe({
  onEvent: ({ event }) => {
    types.push(event.type);
    if (event.metadata?.sequence !== undefined) sequence = event.metadata.sequence;
    if (event.type === "SUBAGENT_STARTED") subagents.push([event.subagentRunId, event.parentSubagentRunId ?? null, event.parentToolCallId ?? null]);
    if (event.type === "RUN_FINISHED") finished = event;
  },
});
agent.messages.push({ id: "u1", role: "user", content: "hello" });

const result = { scenario, runs: [] };
async function run(options) {
  types.length = 0;
  finished = null;
  try {
    await agent.runAgent(options);
    result.runs.push({ ok: true, types: [...types], finished, sequence });
  } catch (error) {
    result.runs.push({ ok: false, error: String(error?.message ?? error), types: [...types], sequence });
  }
}

await run();
if (scenario === "cut-resume") {
  await run({ forwardedProps: { fromSequence: sequence } });
} else if (scenario === "interrupts") {
  const resume = finished.outcome.interrupts.map((interrupt) =>
    interrupt.reason === "approval"
      ? { interruptId: interrupt.id, status: "resolved", payload: { approved: true } }
      : { interruptId: interrupt.id, status: "resolved", payload: "Oslo" });
  await run({ resume });
}
result.messages = agent.messages.map((message) => ({
  id: message.id,
  role: message.role,
  content: message.content ?? null,
  toolCalls: (message.toolCalls ?? []).map((call) => [call.id, call.function.name, call.function.arguments]),
  toolCallId: message.toolCallId ?? null,
  subagentRunId: message.subagentRunId ?? null,
}));
result.state = agent.state;
result.subagents = subagents;
result.stray = stray;
process.stdout.write(JSON.stringify(result));
