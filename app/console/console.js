// The agent server's console: sessions, a live tree of agents, interrupt, resume, answers.
//
// No build step and no dependency. It follows a stream with fetch (so it can send the API key
// and read many events per network read) and applies what arrived once per animation frame:
// a frame parses the text received since the last one, updates the model, then touches only
// the DOM nodes of the agents that changed (text is appended with one appendData per agent).
// That keeps it smooth at tens of thousands of chunks per second (see bench/console_frames.py).
// A chunk type it does not know is counted and otherwise ignored: a "step redone" chunk would
// be handled in apply() by clearing the agent's text of that step.
"use strict";

const params = new URLSearchParams(location.search);
const server = (params.get("server") || location.origin).replace(/\/$/, "");
const $ = (id) => document.getElementById(id);
let apiKey = sessionStorage.getItem("agentServerKey") || "";

const stats = { frames: 0, chunks: 0, work: [], intervals: [], lastFrame: 0 };

// An agent shows the end of its text: laying out a text node costs with its length, and one
// that grows by every frame made frames at 20,000 chunks/s several times slower.
const SHOWN_TEXT = 4000;
// Likewise an agent lists its latest tool calls only.
const SHOWN_TOOLS = 40;
window.consoleStats = stats;

// -- the API ---------------------------------------------------------------------------------

function headers(json) {
  const h = {};
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  if (json) h["Content-Type"] = "application/json";
  return h;
}

async function api(path, method = "GET", body = undefined) {
  const response = await fetch(server + path, {
    method,
    headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null;
  const data = await response.json().catch(() => null);
  if (!response.ok) {
    throw new Error((data && data.error && data.error.message) || `HTTP ${response.status}`);
  }
  return data;
}

function showError(error) {
  const box = $("error");
  box.hidden = !error;
  box.textContent = error ? String(error.message || error) : "";
}

// -- sessions --------------------------------------------------------------------------------

let cursor = null;

async function loadAgents() {
  const agents = await api("/agents");
  $("agent").replaceChildren(
    ...agents.map((agent) => new Option(agent.name, agent.name)),
  );
}

async function loadSessions(more = false) {
  const query = new URLSearchParams({ limit: "30" });
  if (more && cursor) query.set("cursor", cursor);
  const page = await api(`/sessions?${query}`);
  cursor = page.nextCursor;
  $("more").hidden = !cursor;
  const items = page.sessions.map((session) => {
    const item = document.createElement("li");
    item.dataset.id = session.sessionId;
    item.classList.toggle("selected", session.sessionId === view.id);
    const id = document.createElement("span");
    id.className = "id";
    id.textContent = session.sessionId;
    id.title = `${session.agentType} · ${new Date(session.createdAt).toLocaleString()}`;
    const status = document.createElement("span");
    status.className = `status ${session.status}`;
    status.textContent = session.status;
    item.append(id, status);
    item.addEventListener("click", () => select(session.sessionId));
    return item;
  });
  if (more) $("sessions").append(...items);
  else $("sessions").replaceChildren(...items);
}

// -- one session: the model ------------------------------------------------------------------

const view = {
  id: null,
  last: 0,
  status: null,
  agents: new Map(),
  dirty: new Set(),
  pending: new Map(),
  pendingDirty: false,
  text: "",
  ended: false,
  follow: null,
  unknown: 0,
};

function agentOf(id, type, parent) {
  let agent = view.agents.get(id);
  if (!agent) {
    agent = { id, type, parent, status: "running", buffer: "", tools: new Map(), el: null,
              toolsDirty: new Set(), output: undefined, error: null, textStep: null,
              stepChars: 0 };
    view.agents.set(id, agent);
  }
  if (parent && !agent.parent) agent.parent = parent;
  view.dirty.add(agent);
  return agent;
}

function apply(chunk) {
  const agent = agentOf(chunk.agentId, chunk.agentType, null);
  switch (chunk.type) {
    case "text_delta":
      if (agent.textStep !== chunk.step) {
        agent.textStep = chunk.step;
        agent.stepChars = 0;
      }
      agent.buffer += chunk.delta;
      agent.stepChars += chunk.delta.length;
      break;
    case "step_redo":
      // The step runs again: its earlier attempt's text goes.
      if (agent.textStep === chunk.step) dropStepText(agent);
      break;
    case "tool_start":
      agent.tools.set(chunk.toolCallId, { name: chunk.toolName, args: chunk.arguments, state: "running" });
      agent.toolsDirty.add(chunk.toolCallId);
      break;
    case "tool_end": {
      const tool = agent.tools.get(chunk.toolCallId) || { name: chunk.toolName, args: null };
      tool.state = chunk.error == null ? "done" : "error";
      tool.result = chunk.error == null ? chunk.result : chunk.error;
      agent.tools.set(chunk.toolCallId, tool);
      agent.toolsDirty.add(chunk.toolCallId);
      if (view.pending.delete(`${chunk.agentId} ${chunk.toolCallId}`)) view.pendingDirty = true;
      break;
    }
    case "subagent_start":
      agentOf(chunk.subSessionId, chunk.subAgentType, chunk.agentId).status = "running";
      break;
    case "subagent_end": {
      const failed = chunk.result && chunk.result.success === false;
      const child = agentOf(chunk.subSessionId, chunk.subAgentType, chunk.agentId);
      child.status = failed ? "failed" : "completed";
      if (failed) child.error = chunk.result.error;
      break;
    }
    case "output":
      agent.output = chunk.output;
      agent.status = "completed";
      break;
    case "error":
      agent.status = "failed";
      agent.error = chunk.error;
      break;
    case "interrupted":
      agent.status = "interrupted";
      break;
    case "tool_pending":
      view.pending.set(`${chunk.agentId} ${chunk.toolCallId}`, {
        sessionId: chunk.agentId, toolCallId: chunk.toolCallId, toolName: chunk.toolName,
        arguments: chunk.arguments, reason: chunk.reason,
      });
      view.pendingDirty = true;
      agent.status = "paused_awaiting_client";
      break;
    default:
      view.unknown += 1;
  }
  view.last = chunk.sequence;
  stats.chunks += 1;
}

function dropStepText(agent) {
  let left = agent.stepChars;
  const buffered = Math.min(left, agent.buffer.length);
  agent.buffer = agent.buffer.slice(0, agent.buffer.length - buffered);
  left -= buffered;
  if (left > 0 && agent.text) {
    const shown = Math.min(left, agent.text.length);
    agent.text.deleteData(agent.text.length - shown, shown);
  }
  agent.textStep = null;
  agent.stepChars = 0;
}

// Parse the complete SSE events received so far; keep an incomplete tail for later.
function drain() {
  const blocks = view.text.split(/\r?\n\r?\n/);
  view.text = blocks.pop();
  for (const block of blocks) {
    let event = "message";
    let data = "";
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith("data: ")) data = line.slice(6);
      else if (line.startsWith("event: ")) event = line.slice(7);
    }
    if (!data) continue;
    if (event === "end") {
      view.ended = true;
      setStatus(JSON.parse(data).status);
      loadSessions().catch(showError);
    } else if (event === "message") {
      apply(JSON.parse(data));
    }
  }
}

// -- one session: the DOM --------------------------------------------------------------------

let scheduled = false;

function schedule() {
  if (!scheduled) {
    scheduled = true;
    requestAnimationFrame(frame);
  }
}

function frame(now) {
  scheduled = false;
  const started = performance.now();
  drain();
  render();
  const ended = performance.now();
  if (stats.lastFrame) record(stats.intervals, now - stats.lastFrame);
  stats.lastFrame = now;
  record(stats.work, ended - started);
  stats.frames += 1;
}

function record(list, value) {
  list.push(value);
  if (list.length > 5000) list.splice(0, list.length - 5000);
}

function render() {
  for (const agent of view.dirty) renderAgent(agent);
  view.dirty.clear();
  if (view.pendingDirty) renderPending();
  $("counter").textContent = `${view.last} chunks`;
}

function renderAgent(agent) {
  if (!agent.el) {
    const el = document.createElement("div");
    el.className = "agent";
    el.dataset.id = agent.id;
    el.innerHTML = '<div class="head"><span class="type"></span><span class="status"></span>' +
      '<span class="sid"></span></div><div class="text"></div><ul class="tools"></ul>' +
      '<div class="children"></div>';
    el.querySelector(".type").textContent = agent.type;
    el.querySelector(".sid").textContent = agent.id;
    agent.text = document.createTextNode("");
    el.querySelector(".text").append(agent.text);
    agent.el = el;
    agent.badge = el.querySelector(".status");
    agent.list = el.querySelector(".tools");
    agent.toolEls = new Map();
    const parent = agent.parent && view.agents.get(agent.parent);
    if (parent && !parent.el) renderAgent(parent);
    (parent ? parent.el.querySelector(".children") : $("tree")).append(el);
  }
  if (agent.buffer) {
    agent.text.appendData(agent.buffer);
    agent.buffer = "";
    if (agent.text.length > 2 * SHOWN_TEXT) {
      agent.text.deleteData(0, agent.text.length - SHOWN_TEXT);
      agent.el.classList.add("clipped");
    }
  }
  if (agent.badge.textContent !== agent.status) {
    agent.badge.textContent = agent.status;
    agent.badge.className = `status ${agent.status}`;
  }
  for (const id of agent.toolsDirty) {
    const tool = agent.tools.get(id);
    let item = agent.toolEls.get(id);
    if (!item) {
      item = document.createElement("li");
      agent.toolEls.set(id, item);
      agent.list.append(item);
      if (agent.toolEls.size > SHOWN_TOOLS) {
        const [oldest, element] = agent.toolEls.entries().next().value;
        agent.toolEls.delete(oldest);
        agent.tools.delete(oldest);
        element.remove();
      }
    }
    const result = tool.state === "running" ? "…" : JSON.stringify(tool.result);
    item.textContent = `${tool.name}(${JSON.stringify(tool.args)}) → ${result}`;
    item.className = tool.state === "error" ? "tool-error" : "";
  }
  agent.toolsDirty.clear();
}

function renderPending() {
  view.pendingDirty = false;
  const calls = [...view.pending.values()];
  $("pending").hidden = calls.length === 0 || view.status !== "paused_awaiting_client";
  $("pending-calls").replaceChildren(...calls.map((call) => {
    const row = document.createElement("div");
    row.className = "call";
    row.dataset.call = call.toolCallId;
    const what = document.createElement("code");
    what.textContent = `${call.toolName}(${JSON.stringify(call.arguments)})`;
    row.append(what);
    if (call.reason === "approval") {
      for (const [value, label] of [["yes", "Approve"], ["no", "Deny"]]) {
        const choice = document.createElement("label");
        const input = document.createElement("input");
        input.type = "radio";
        input.name = `approve-${call.toolCallId}`;
        input.value = value;
        input.checked = value === "yes";
        choice.append(input, ` ${label}`);
        row.append(choice);
      }
    } else {
      const input = document.createElement("input");
      input.name = `result-${call.toolCallId}`;
      input.placeholder = "result (JSON or text)";
      input.setAttribute("aria-label", `result of ${call.toolName}`);
      row.append(input);
    }
    return row;
  }));
}

function setStatus(status) {
  view.status = status;
  $("status").textContent = status;
  $("status").className = `status ${status}`;
  $("interrupt").disabled = status !== "running";
  $("resume").disabled = status !== "interrupted";
  view.pendingDirty = true;
  schedule();
}

// -- following ---------------------------------------------------------------------------------

function stopFollowing() {
  if (view.follow) view.follow.abort();
  view.follow = null;
}

async function follow() {
  stopFollowing();
  const controller = new AbortController();
  view.follow = controller;
  view.ended = false;
  let failures = 0;
  while (!controller.signal.aborted && !view.ended) {
    drain();
    view.text = "";
    try {
      const url = `${server}/stream/${encodeURIComponent(view.id)}?fromSequence=${view.last}`;
      const response = await fetch(url, { headers: headers(false), signal: controller.signal });
      if (response.status === 204) return;
      if (!response.ok) throw new Error(`stream: HTTP ${response.status}`);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        view.text += value;
        failures = 0;
        schedule();
      }
    } catch (error) {
      if (controller.signal.aborted) return;
      failures += 1;
      if (failures > 3) showError(error);
    }
    drain();
    if (!view.ended) await new Promise((done) => setTimeout(done, Math.min(250 * 2 ** failures, 5000)));
  }
}

async function select(id) {
  stopFollowing();
  Object.assign(view, { id, last: 0, status: null, ended: false, text: "", unknown: 0 });
  view.agents = new Map();
  view.dirty = new Set();
  view.pending = new Map();
  $("tree").replaceChildren();
  $("detail").hidden = false;
  $("title").textContent = id;
  showError(null);
  location.hash = `session=${encodeURIComponent(id)}`;
  for (const item of $("sessions").children) item.classList.toggle("selected", item.dataset.id === id);
  try {
    const status = await api(`/status/${encodeURIComponent(id)}?tree=true`);
    setStatus(status.status);
    const seed = (node, parent) => {
      const agent = agentOf(node.sessionId, node.agentType, parent);
      agent.status = node.status;
      node.children.forEach((child) => seed(child, node.sessionId));
    };
    seed(status.tree, null);
    schedule();
  } catch (error) {
    showError(error);
    return;
  }
  follow();
}

async function act(call) {
  showError(null);
  try {
    await call();
    setStatus("running");
    follow();
  } catch (error) {
    showError(error);
  }
}

// -- wiring --------------------------------------------------------------------------------

$("key").value = apiKey;
$("server").textContent = server;
$("key").addEventListener("change", () => {
  apiKey = $("key").value.trim();
  sessionStorage.setItem("agentServerKey", apiKey);
  boot();
});
$("refresh").addEventListener("click", () => loadSessions().catch(showError));
$("more").addEventListener("click", () => loadSessions(true).catch(showError));
$("start").addEventListener("submit", async (event) => {
  event.preventDefault();
  showError(null);
  try {
    const started = await api("/start", "POST", { agentType: $("agent").value, message: $("message").value });
    await select(started.sessionId);
    loadSessions().catch(showError);
  } catch (error) {
    showError(error);
  }
});
$("interrupt").addEventListener("click", async () => {
  try {
    await api(`/interrupt/${encodeURIComponent(view.id)}`, "POST", { reason: "stopped from the console" });
  } catch (error) {
    showError(error);
  }
});
$("resume").addEventListener("click", () => act(() => api(`/resume/${encodeURIComponent(view.id)}`, "POST", {})));
$("continue").addEventListener("submit", (event) => {
  event.preventDefault();
  const message = $("next").value;
  $("next").value = "";
  act(() => api(`/resume/${encodeURIComponent(view.id)}`, "POST", { message }));
});
$("pending").addEventListener("submit", (event) => {
  event.preventDefault();
  const form = new FormData($("pending"));
  const toolResults = [];
  const approvals = [];
  for (const call of view.pending.values()) {
    const answer = { toolCallId: call.toolCallId };
    if (call.sessionId !== view.id) answer.sessionId = call.sessionId;
    if (call.reason === "approval") {
      approvals.push({ ...answer, approved: form.get(`approve-${call.toolCallId}`) === "yes" });
    } else {
      const text = String(form.get(`result-${call.toolCallId}`) || "");
      let result = text;
      try { result = JSON.parse(text); } catch { /* plain text */ }
      toolResults.push({ ...answer, result });
    }
  }
  view.pending.clear();
  view.pendingDirty = true;
  act(() => api(`/resume/${encodeURIComponent(view.id)}`, "POST", { toolResults, approvals }));
});

async function boot() {
  showError(null);
  try {
    await Promise.all([loadAgents(), loadSessions()]);
  } catch (error) {
    showError(error);
  }
  const wanted = new URLSearchParams(location.hash.slice(1)).get("session");
  if (wanted && wanted !== view.id) select(wanted);
}

boot();
