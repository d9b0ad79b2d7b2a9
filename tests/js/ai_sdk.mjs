// Drives the server with the AI SDK's own chat client (`AbstractChat`, what `useChat` wraps, and
// `DefaultChatTransport`), and prints what the client ended up with, as JSON, for the Python test.
//
//   node ai_sdk.mjs <server url> <scenario> <chat id> [agent type]
//
// chat          send one message and wait for the turn to end
// cut-resume    the first response is cut after a few events; then `resumeStream()` (what
//               `useChat({resume: true})` does on load) replays the running turn
// client-tools  the turn pauses for a client tool and an approval; answer both and send again
import { AbstractChat, DefaultChatTransport } from "ai";

const [base, scenario, chatId, agentType = "boss"] = process.argv.slice(2);

class State {
  constructor() {
    this.messages = [];
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage(message) { this.messages = this.messages.concat(message); }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  }
  snapshot(thing) { return structuredClone(thing); }
}

class NodeChat extends AbstractChat {
  constructor(options) { super({ ...options, state: new State() }); }
}

// A fetch whose first streamed response breaks after `events` SSE events, as a dropped
// connection would.
function cuttingFetch(events) {
  let cut = false;
  return async (url, init) => {
    const response = await fetch(url, init);
    if (cut || !response.body || init?.method !== "POST") return response;
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

function summary(messages) {
  return messages.map((message) => ({
    id: message.id,
    role: message.role,
    parts: message.parts
      .filter((part) => part.type !== "step-start")
      .map((part) => {
        if (part.type === "text") return { type: "text", text: part.text };
        if (part.type === "dynamic-tool")
          return { type: "tool", toolName: part.toolName, toolCallId: part.toolCallId,
                   state: part.state, input: part.input, output: part.output ?? null };
        if (part.type.startsWith("data-")) return { type: part.type, id: part.id, data: part.data };
        return { type: part.type };
      }),
  }));
}

const errors = [];
const transport = new DefaultChatTransport({
  api: `${base}/ai-sdk/chat`,
  body: { agentType },
  fetch: scenario === "cut-resume" ? cuttingFetch(6) : undefined,
});
const chat = new NodeChat({
  id: chatId,
  transport,
  onError: (error) => errors.push(String(error.message ?? error)),
});

const result = { scenario };
await chat.sendMessage({ text: "hello" });
result.afterSend = { status: chat.status, messages: summary(chat.messages) };
if (scenario === "cut-resume") {
  await chat.resumeStream();
} else if (scenario === "client-tools") {
  const pending = chat.lastMessage.parts.filter((part) => part.type === "dynamic-tool");
  for (const part of pending) {
    if (part.state === "approval-requested") {
      await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
    } else if (part.state === "input-available") {
      await chat.addToolOutput({ tool: part.toolName, toolCallId: part.toolCallId, output: "Oslo" });
    }
  }
  await chat.sendMessage();
}
result.status = chat.status;
result.messages = summary(chat.messages);
result.errors = errors;
process.stdout.write(JSON.stringify(result));
