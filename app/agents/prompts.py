"""The inventory placeholders of a system prompt: `${_installed_tools}`, `${_installed_skills}`
and `${_installed_subagents}` become what the agent actually holds when its prompt is rendered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.agents.agent import AgentConfig
    from app.agents.capabilities import Skill
    from app.agents.delegation import Delegation

TOOLS = "${_installed_tools}"
"""Replaced by the agent's tools, one `- name: description` line each."""
SKILLS = "${_installed_skills}"
"""Replaced by the agent's skills: a `- name: description` line and the skill's prompt each."""
SUBAGENTS = "${_installed_subagents}"
"""Replaced by the categories the agent may delegate to and whether free-form ones are allowed."""

NONE = "(none)"
FREE_FORM_HINT = (
    "Free-form categories are allowed: any other category name (letters, digits, '-' and '_') "
    "starts a general subagent of that name."
)
REGISTERED_ONLY_HINT = "Only these categories are allowed."


def _line(name: str, description: str) -> str:
    # The first line only: a library tool's description runs on (the `subagent` tool lists its
    # categories), and the inventory is a list of one line per tool.
    first = description.strip().splitlines()[0] if description.strip() else ""
    return f"- {name}: {first}" if first else f"- {name}"


def installed_tools(agent: AgentConfig) -> str:
    """The tools the agent is offered, one line each, or `(none)`."""
    lines = [_line(tool.name, tool.description) for tool in agent.offered_tools]
    return "\n".join(lines) or NONE


def installed_skills(skills: Sequence[Skill]) -> str:
    """Each skill's line, then its prompt text, or `(none)`."""
    parts = []
    for skill in skills:
        line = _line(skill.name, skill.description)
        parts.append(f"{line}\n{skill.prompt.strip()}" if skill.prompt.strip() else line)
    return "\n".join(parts) or NONE


def installed_subagents(delegation: Delegation | None) -> str:
    """The categories, one line each, then whether free-form ones are allowed, or `(none)`."""
    if delegation is None:
        return NONE
    lines = [_line(entry.category, entry.summary) for entry in delegation.entries]
    if delegation.free_form is not None:
        lines.append(FREE_FORM_HINT)
    elif lines:
        lines.append(REGISTERED_ONLY_HINT)
    return "\n".join(lines) or NONE


def render_prompt(agent: AgentConfig) -> str:
    """The agent's system prompt with each placeholder it holds replaced."""
    # Exact replacement, not string.Template: a prompt's other `$` (prices, shell) stays as
    # written, and only our three names are ever touched.
    prompt = agent.system_prompt
    if TOOLS in prompt:
        prompt = prompt.replace(TOOLS, installed_tools(agent))
    if SKILLS in prompt:
        prompt = prompt.replace(SKILLS, installed_skills(agent.skills))
    if SUBAGENTS in prompt:
        prompt = prompt.replace(SUBAGENTS, installed_subagents(agent.delegation))
    return prompt


def with_inventory(prompt: str) -> str:
    """A child's prompt template: `prompt` with the tools and skills sections appended unless it
    places those placeholders itself."""
    sections = ""
    if TOOLS not in prompt:
        sections += f"\n\n## Available Tools\n{TOOLS}"
    if SKILLS not in prompt:
        sections += f"\n\n## Available Skills\n{SKILLS}"
    return prompt + sections if prompt else sections.lstrip("\n")
