"""Seeded scenarios: a tree's plan, a fault plan for the store, and what happens to the processes.

`generate(seed)` always gives the same scenario for a seed; `Scenario.describe()` is the one line
a report prints beside a failing seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from tests.faults.faulty_store import FaultConfig, ReadFault, WriteFault
from tests.faults.tree import MODEL_FAULTS, TOOL_FAULTS, IdMode, Plan

ActionKind = Literal[
    "interrupt",
    "interrupt_child",
    "crash_restart",
    "crash_takeover",
    "crash_interrupt",
    "freeze",
]


@dataclass(frozen=True)
class Action:
    """Something done to the run once `after_calls` model and tool calls have started.

    - `interrupt`: interrupt the root (through node `via`), then resume it if `resume`.
    - `interrupt_child`: interrupt one running child directly.
    - `crash_restart`: node A dies; it restarts with the same server id after `delay` s.
    - `crash_takeover`: node A dies; node B takes its runs over once their lease expires.
    - `crash_interrupt`: node A dies; the root is interrupted through B before B takes it over.
    - `freeze`: node A stops (SIGSTOP) past its lease; B takes over; A goes on again.
    """

    kind: ActionKind
    after_calls: int
    via: Literal["A", "B"] = "A"
    resume: bool = True
    delay: float = 0.0

    def describe(self) -> str:
        """One short line."""
        extra = ""
        if self.kind == "interrupt":
            extra = f" via {self.via}{' +resume' if self.resume else ''}"
        elif self.kind == "crash_restart":
            extra = f" after {self.delay:g}s"
        return f"{self.kind}@{self.after_calls}{extra}"


@dataclass(frozen=True)
class Scenario:
    """One seeded scenario."""

    seed: int
    plan: Plan
    faults: FaultConfig
    actions: tuple[Action, ...]
    lease_ms: int
    first_message: str
    """The root's first message (sometimes a value a store may not hold)."""

    @property
    def needs_second_node(self) -> bool:
        """Whether a second process (B) shares the store."""
        return any(
            a.kind in ("crash_takeover", "crash_interrupt", "freeze") or a.via == "B"
            for a in self.actions
        )

    def describe(self) -> str:
        """The scenario in one line."""
        plan, faults = self.plan, self.faults
        parts = [
            f"ids={plan.id_mode}",
            f"model={plan.model_rate:.2f}:{','.join(plan.model_faults) or '-'}",
            f"tool={plan.tool_rate:.2f}:{','.join(plan.tool_faults) or '-'}",
            f"write={faults.write_rate:.2f}:{','.join(faults.write_kinds) or '-'}",
            f"read={faults.read_rate:.2f}:{','.join(faults.read_kinds) or '-'}",
        ]
        if plan.ask:
            parts.append("ask")
        if self.first_message != "go":
            parts.append(f"message={self.first_message!r}")
        parts += [action.describe() for action in self.actions]
        return " ".join(parts)


def _subset(r: random.Random, items: tuple[str, ...], most: int) -> tuple[str, ...]:
    return tuple(sorted(r.sample(items, r.randint(1, min(most, len(items))))))


def generate(seed: int) -> Scenario:
    """The scenario of `seed`."""
    r = random.Random(f"scenario|{seed}")
    id_mode: IdMode = r.choices(["unique", "reuse", "dup", "none"], [5, 2, 1, 2])[0]  # type: ignore[assignment]
    model_rate = r.choice([0.0, 0.0, 0.1, 0.25])
    tool_rate = r.choice([0.0, 0.1, 0.25])
    write_rate = r.choice([0.0, 0.05, 0.1, 0.2])
    read_rate = r.choice([0.0, 0.0, 0.05, 0.1])
    plan = Plan(
        seed=seed,
        id_mode=id_mode,
        model_rate=model_rate,
        model_faults=_subset(r, MODEL_FAULTS, 3),  # type: ignore[arg-type]
        tool_rate=tool_rate,
        tool_faults=_subset(r, TOOL_FAULTS, 3),  # type: ignore[arg-type]
        ask=r.random() < 0.2,
        latency=r.choice([0.0, 0.01, 0.03]),
    )
    faults = FaultConfig(
        seed=seed,
        write_rate=write_rate,
        read_rate=read_rate,
        write_kinds=tuple(WriteFault(k) for k in _subset(r, tuple(WriteFault), 3)),
        read_kinds=tuple(ReadFault(k) for k in _subset(r, tuple(ReadFault), 2)),
        slow_seconds=r.choice([0.01, 0.05]),
    )
    actions: list[Action] = []
    roll = r.random()
    after = r.randint(1, 8)
    if roll < 0.2:
        actions.append(
            Action("interrupt", after, via=r.choice(["A", "A", "B"]), resume=r.random() < 0.7)
        )
    elif roll < 0.3:
        actions.append(Action("interrupt_child", after))
    elif roll < 0.5:
        actions.append(Action("crash_restart", after, delay=r.choice([0.0, 0.05, 0.2])))
    elif roll < 0.6:
        actions.append(Action("crash_takeover", after))
    elif roll < 0.65:
        actions.append(Action("crash_interrupt", after))
    elif roll < 0.72:
        actions.append(Action("freeze", after))
    message = r.choices(["go", "go \x00 nul", "go \ud800 lone"], [18, 1, 1])[0]
    return Scenario(
        seed=seed,
        plan=plan,
        faults=faults,
        actions=tuple(actions),
        lease_ms=400,
        first_message=message,
    )
