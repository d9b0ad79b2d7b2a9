"""What a `subagent` child gets from its parent, in a real run: inherited tools and permissions,
skills (the category's and `load_skills`), the prompt placeholders, free-form categories built
from the parent's model, permissions refusing a call, and the delegation depth limit."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app import (
    AgentRegistry,
    AgentRuntime,
    Delegation,
    FreeSubagents,
    InheritancePolicy,
    Skill,
    Subagent,
    ToolPermissions,
    define_agent,
    define_tool,
)
from app.agents import ToolContext
from app.models import FunctionModel, ModelRequest, ModelResponse, ToolCall
from app.protocol import ToolMessage, UserMessage
from app.store import StateStore
from tests.runtime.background_agents import Lead, Unchecked, delegate


class Query(BaseModel):
    q: str


def tool(name: str, description: str) -> Any:
    async def run(input: Query, ctx: ToolContext[Any]) -> str:
        return f"{name}({input.q}) by {ctx.agent_type}"

    return define_tool(name, description=description, input_schema=Query)(run)


SEARCH = tool("search", "Search the web.")
WRITE = tool("write", "Write a file.")
SECRET = tool("secret", "Read the secrets.")
FETCH = tool("fetch", "Fetch a page.")
NOTE = tool("note", "Keep a note.")
WEB = Skill("web", description="Reading the web.", prompt="Fetch pages with fetch.", tools=[FETCH])
NOTES = Skill("notes", description="Note taking.", prompt="Keep notes short.", tools=[NOTE])


def helper(seen: dict[str, Any]) -> Any:
    """Calls every tool it was given (once each), then reports what it got."""

    def model(request: ModelRequest) -> ModelResponse:
        seen[request.session_id] = request
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            names = [spec.name for spec in request.tools] + ["secret"]
            return ModelResponse(
                tool_calls=[ToolCall(name, {"q": "x"}, id=f"t{i}") for i, name in enumerate(names)]
            )
        results = [m.error or str(m.result) for m in request.messages if isinstance(m, ToolMessage)]
        return ModelResponse(text=" | ".join(results))

    return define_agent(
        "helper",
        description="Helps.",
        system_prompt="You help.",
        tools=[WRITE],
        model=Unchecked(model),
    )


async def test_a_child_gets_what_its_policy_and_skills_give_it(store: StateStore) -> None:
    seen: dict[str, Any] = {}
    lead = Lead(
        [
            [ToolCall("secret", {"q": "x"}, id="s")],
            [delegate("h", "help", category="helper", background=False, load_skills=["notes"])],
        ]
    )
    entry = Subagent(
        helper(seen),
        skills=["web"],
        inheritance=InheritancePolicy(inherit_tools=["search", "secret"], inherit_permissions=True),
    )
    agent = lead.agent(
        Delegation([entry], skills=[WEB, NOTES]),
        system_prompt="You lead.\n${_installed_subagents}",
        tools=[SEARCH, SECRET],
        permissions=ToolPermissions(deny=["secret"]),
        unchecked=True,
    )
    async with AgentRuntime(AgentRegistry([agent]), store=store) as runtime:
        result = await (await runtime.execute("lead", "go", session_id="L")).result()

    assert result.status == "completed", result
    got = Lead.answers(lead.requests[-1].messages)
    # The parent's own permissions: the denied tool is not offered and its call is refused.
    first = lead.requests[0]
    assert "secret" not in [spec.name for spec in first.tools]
    assert got["s"].startswith("error: Tool 'secret' is not permitted")
    assert "- helper: Helps." in first.system_prompt
    assert "Only these categories are allowed." in first.system_prompt
    # The child: its own tool, the inherited one, its category's skill and the loaded one.
    child = seen["L-task-h"]
    assert [spec.name for spec in child.tools] == ["write", "fetch", "note", "search"]
    prompt = child.system_prompt
    assert prompt.startswith("You help.")
    assert "## Available Tools\n- write: Write a file.\n- fetch: Fetch a page." in prompt
    assert "- search: Search the web." in prompt
    assert "- web: Reading the web.\nFetch pages with fetch." in prompt
    assert "- notes: Note taking.\nKeep notes short." in prompt
    # inherit_system_prompt (the default) appends the parent's prompt.
    assert "You lead." in prompt
    outputs = got["h"].split(" | ")
    assert outputs[:4] == [
        "write(x) by helper",
        "fetch(x) by helper",
        "note(x) by helper",
        "search(x) by helper",
    ]
    # The inherited permissions refuse what the parent's refuse (the tool is inherited, and
    # neither offered nor run).
    assert outputs[4] == got["s"].removeprefix("error: ").replace("'lead'", "'helper'")


async def test_without_inheritance_a_child_has_only_its_own(store: StateStore) -> None:
    seen: dict[str, Any] = {}
    lead = Lead([[delegate("h", "help", category="helper", background=False)]])
    entry = Subagent(helper(seen), inheritance=InheritancePolicy(enabled=False))
    agent = lead.agent(Delegation([entry]), system_prompt="You lead.", tools=[SEARCH])
    async with AgentRuntime(AgentRegistry([agent]), store=store) as runtime:
        result = await (await runtime.execute("lead", "go", session_id="L")).result()

    assert result.status == "completed", result
    child = seen["L-task-h"]
    assert [spec.name for spec in child.tools] == ["write"]
    assert "You lead." not in child.system_prompt
    assert "## Available Skills\n(none)" in child.system_prompt


async def test_a_free_form_category_runs_on_the_parents_model(store: StateStore) -> None:
    requests: list[ModelRequest] = []

    def model(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if request.session_id == "L-task-f":
            return ModelResponse(text=f"critique of {request.messages[0].content}")
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            return ModelResponse(
                tool_calls=[delegate("f", "the plan", category="critic", background=False)]
            )
        (answer,) = [m for m in request.messages if isinstance(m, ToolMessage)]
        return ModelResponse(text=str(answer.result))

    free = FreeSubagents(system_prompt="You are a {category}.")
    lead = define_agent(
        "lead",
        system_prompt="Lead. ${_installed_subagents}",
        model=FunctionModel(model),
        delegation=Delegation(free_form=free),
    )
    async with AgentRuntime(AgentRegistry([lead]), store=store) as runtime:
        result = await (await runtime.execute("lead", "go", session_id="L")).result()
        child = await runtime.status("L-task-f")

    assert (result.status, result.output) == ("completed", "critique of the plan")
    assert child.agent_type == "critic"
    (critic,) = [r for r in requests if r.session_id == "L-task-f"]
    assert critic.system_prompt.startswith("You are a critic.")
    assert "Free-form categories are allowed" in requests[0].system_prompt
    assert isinstance(critic.messages[0], UserMessage)


async def test_a_delegation_past_the_depth_limit_is_a_tool_error(store: StateStore) -> None:
    inner = Lead([[delegate("d", "deeper", category="leaf", background=False)]])
    leaf = define_agent("leaf", model=FunctionModel(lambda r: ModelResponse(text="leaf")))
    mid = inner.agent(Delegation([leaf], max_depth=1), name="mid")
    outer = Lead([[delegate("m", "go on", category="mid", background=False)]])
    lead = outer.agent(Delegation([mid]))
    async with AgentRuntime(AgentRegistry([lead]), store=store) as runtime:
        result = await (await runtime.execute("lead", "go", session_id="L")).result()

    assert result.status == "completed", result
    got = Lead.answers(inner.requests[-1].messages)
    assert got["d"] == (
        "error: Delegation depth limit reached: a subagent here would be 2 levels deep and "
        "the limit is 1. Do this task yourself."
    )
