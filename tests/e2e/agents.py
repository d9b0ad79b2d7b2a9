"""The agent tree the end-to-end servers run (`AGENT_MODULE=tests.e2e.agents:registry`).

lead                 delegates three jobs at once, then reports their scores
└── worker  (x3)     measure + a checker sub-agent in parallel, then finishes with a score
    └── checker      measure, then finishes with a score

curator              spawns two non-blocking persistent scouts, ends its turn; on the next
└── scout   (x2)     turn reports the completion notices it got (slowly, to be killed in)

dispatcher           launches N background `subagent` runners (its message: "N [slow] [idle]"),
└── runner  (xN)     waits until it has been told of each (unless idle: it ends its turn, and
                     waits on the next), then reports the notices (slowly, to be killed in); a
                     runner takes RUN_SECONDS (twice that if slow), then answers in the summary
                     envelope

Every model call and every tool call appends one JSON line to the file named by `E2E_CALL_LOG`
(when set) before it does anything else, with the process id, so a test that kills a server can
tell the calls made before the kill from those made after the restart. The latencies make a run
last about a second and a half, and keep the three workers out of step.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from pydantic import BaseModel

from app import (
    AgentRegistry,
    Delegation,
    PersistentAgent,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from app.agents import ToolContext
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import AssistantMessage, SystemMessage, ToolMessage, UserMessage

CALL_LOG_ENV = "E2E_CALL_LOG"
JOBS = [("alpha", 2), ("beta", 3), ("gamma", 4)]
"""The lead's jobs: (task, size). A job's size sets how long its `measure` calls take."""


def log_call(kind: str, session_id: str, key: str) -> None:
    """Append one call to the call log, in one write (atomic for a line this short)."""
    path = os.environ.get(CALL_LOG_ENV)
    if not path:
        return
    line = json.dumps({"kind": kind, "session": session_id, "key": key, "pid": os.getpid()})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _turn(request: ModelRequest) -> int:
    return sum(1 for message in request.messages if isinstance(message, AssistantMessage))


class Job(BaseModel):
    task: str
    size: int


class Score(BaseModel):
    task: str
    score: int


class Measure(BaseModel):
    text: str
    size: int


@define_tool("measure", description="Measure a text.", input_schema=Measure)
async def measure(input: Measure, ctx: ToolContext[Any]) -> int:
    log_call("tool", ctx.session_id, ctx.tool_call_id)
    await asyncio.sleep(0.1 * input.size)
    return len(input.text) * input.size


def _results(request: ModelRequest) -> dict[str, Any]:
    return {m.tool_name: m.result for m in request.messages if isinstance(m, ToolMessage)}


def _job(request: ModelRequest) -> Job:
    first = request.messages[0]
    assert isinstance(first, UserMessage)
    return Job.model_validate_json(first.content)


def checker_model(request: ModelRequest) -> ModelResponse:
    log_call("model", request.session_id, str(_turn(request)))
    job = _job(request)
    if _turn(request) == 0:
        return ModelResponse(
            text=f"checking {job.task} twice over",
            tool_calls=[ToolCall("measure", {"text": job.task * 2, "size": job.size})],
        )
    return ModelResponse(
        tool_calls=[
            ToolCall("__finish__", {"task": job.task, "score": _results(request)["measure"]})
        ]
    )


checker = define_agent(
    "checker",
    description="Checks a job.",
    tools=[measure],
    output_schema=Score,
    model=FunctionModel(checker_model, latency=0.15),
)


def worker_model(request: ModelRequest) -> ModelResponse:
    log_call("model", request.session_id, str(_turn(request)))
    job = _job(request)
    if _turn(request) == 0:
        return ModelResponse(
            text=f"working on {job.task} of size {job.size}",
            tool_calls=[
                ToolCall("measure", {"text": job.task, "size": job.size}),
                ToolCall("subagent__checker", job.model_dump()),
            ],
        )
    results = _results(request)
    score = results["measure"] + results["subagent__checker"]["score"]
    return ModelResponse(tool_calls=[ToolCall("__finish__", {"task": job.task, "score": score})])


worker = define_agent(
    "worker",
    description="Works on a job.",
    tools=[measure, create_sub_agent_tool(checker, Job)],
    output_schema=Score,
    model=FunctionModel(worker_model, latency=0.2),
)


def lead_model(request: ModelRequest) -> ModelResponse:
    log_call("model", request.session_id, str(_turn(request)))
    if _turn(request) == 0:
        return ModelResponse(
            text="splitting the work in three",
            tool_calls=[
                ToolCall("subagent__worker", {"task": task, "size": size}) for task, size in JOBS
            ],
        )
    scores = [m.result for m in request.messages if isinstance(m, ToolMessage)]
    return ModelResponse(text="scores: " + ", ".join(json.dumps(s) for s in scores))


lead = define_agent(
    "lead",
    description="Splits work between workers.",
    tools=[create_sub_agent_tool(worker, Job)],
    model=FunctionModel(lead_model, latency=0.15),
)


SCOUTED = ("dunes", "reefs")
"""The curator's scouts' topics: scouts `scout-1` and `scout-2`, in this order."""
REPORT_SECONDS = 1.0
"""How long the curator's report takes: a test kills its server in the middle of it."""


class Note(BaseModel):
    note: str


def scout_model(request: ModelRequest) -> ModelResponse:
    log_call("model", request.session_id, str(_turn(request)))
    told = [m.content for m in request.messages if isinstance(m, UserMessage)]
    return ModelResponse(tool_calls=[ToolCall("__finish__", {"note": "; ".join(told)})])


scout = define_agent(
    "scout",
    description="Scouts a topic.",
    output_schema=Note,
    model=FunctionModel(scout_model, latency=0.6),
)


def curator_model(request: ModelRequest) -> Any:
    turn = _turn(request)
    log_call("model", request.session_id, str(turn))
    if turn == 0:
        spawns = [
            ToolCall("companion__spawnAgent", {"agent": "scout", "initialMessage": topic})
            for topic in SCOUTED
        ]
        return ModelResponse(text="sending two scouts", tool_calls=spawns)
    notices = [m.content for m in request.messages if isinstance(m, SystemMessage)]

    async def report() -> ModelResponse:
        await asyncio.sleep(REPORT_SECONDS)
        return ModelResponse(text=f"turn {turn}: " + " | ".join(notices))

    return ModelResponse(text="the scouts are out") if turn == 1 else report()


curator = define_agent(
    "curator",
    description="Sends scouts out and reports what they found.",
    persistent_agents=[PersistentAgent(scout, mode="non-blocking")],
    model=FunctionModel(curator_model, latency=0.05),
)

RUN_SECONDS = 0.8
"""How long a background runner works: long enough to be seen running, and killed in."""


def _first_text(request: ModelRequest) -> str:
    return next(m.content for m in request.messages if isinstance(m, UserMessage))


def runner_model(request: ModelRequest) -> Any:
    """Logs its start ("model") and its end ("done"), to count how many run at once."""
    log_call("model", request.session_id, str(_turn(request)))
    task = _first_text(request)

    async def run() -> ModelResponse:
        await asyncio.sleep(RUN_SECONDS * (2 if task.endswith(" slow") else 1))
        log_call("done", request.session_id, str(_turn(request)))
        return ModelResponse(
            text=f"<subagent_background_result><summary>did {task}</summary>"
            f"<full_result>All of {task}.</full_result></subagent_background_result>"
        )

    return run()


runner = define_agent(
    "runner", description="Runs one job.", model=FunctionModel(runner_model, latency=0.01)
)


def launched(root: str, count: int) -> list[str]:
    """The session ids of the runners a dispatcher `root` told to launch `count` launches."""
    return [f"{root}-task-j{index}" for index in range(count)]


def dispatcher_model(request: ModelRequest) -> Any:
    turn = _turn(request)
    log_call("model", request.session_id, str(turn))
    words = _first_text(request).split()
    count, suffix = int(words[0]), " slow" if "slow" in words else ""
    if turn == 0:
        jobs = [
            ToolCall(
                "subagent",
                {"category": "runner", "prompt": f"job {index}{suffix}", "background": True},
                id=f"j{index}",
            )
            for index in range(count)
        ]
        return ModelResponse(text=f"launching {count}", tool_calls=jobs)
    notices = [m.content for m in request.messages if isinstance(m, SystemMessage)]
    if "idle" in words and turn == 1:
        return ModelResponse(text="they run on their own")
    if sum(notice.count("\n- ") for notice in notices) < count:
        return ModelResponse(tool_calls=[ToolCall("subagent_wait", {}, id=f"w{turn}")])
    log_call("report", request.session_id, str(turn))

    async def report() -> ModelResponse:
        await asyncio.sleep(REPORT_SECONDS)
        return ModelResponse(text="\n".join(notices))

    return report()


dispatcher = define_agent(
    "dispatcher",
    description="Launches background runners and reports what they did.",
    delegation=Delegation([runner]),
    model=FunctionModel(dispatcher_model, latency=0.05),
)

registry = AgentRegistry([lead, worker, checker, curator, dispatcher])

EXPECTED_OUTPUT = "scores: " + ", ".join(
    json.dumps({"task": task, "score": len(task) * size * 3}) for task, size in JOBS
)
"""The lead's output: each worker scores len(task) * size, plus its checker's 2x that."""


def expected_calls(root: str) -> list[tuple[str, str, str]]:
    """Every (kind, session, key) a complete run of `lead` as `root` makes, once each."""
    calls = [("model", root, "0"), ("model", root, "1")]
    for index, _ in enumerate(JOBS):
        worker_id = f"{root}-sub-call-0-{index}"
        checker_id = f"{worker_id}-sub-call-0-1"
        calls += [
            ("model", worker_id, "0"),
            ("model", worker_id, "1"),
            ("tool", worker_id, "call-0-0"),
            ("model", checker_id, "0"),
            ("model", checker_id, "1"),
            ("tool", checker_id, "call-0-0"),
        ]
    return calls
