"""A session's status as `/status` shows it, read from the store: its record, its children's
refs, how far its stream has got and, for a paused tree, every call it waits for; with
`tree=true`, also every local descendant with its status and usage, nested as the refs order
them, and the tree's summed usage.

Local descendants share their root's stream, so one read finds them all; each node with
children costs one read of its refs. A remote child is a leaf: its own tree is on its server.
"""

from __future__ import annotations

from app.agents import AgentRegistry
from app.errors import StreamNotFoundError
from app.protocol import SubSessionRef
from app.protocol.api import PendingCall, SessionStatusView, UsageView
from app.protocol.browser import SessionTreeView, TreeNode, UsageTotals
from app.runtime.pending import paused_tree
from app.store import SessionRecord, StateStore

MAX_DEPTH = 64
"""The deepest tree served: deeper levels are left out (`truncated`)."""


async def session_status(
    store: StateStore, registry: AgentRegistry, session_id: str
) -> SessionStatusView:
    """The session's status, its children and how far its stream has got."""
    record = await store.get_session(session_id)
    refs = await store.get_sub_session_refs(session_id)
    try:
        stream = await store.get_stream(record.stream_id)
        last_sequence, stream_status = stream.last_sequence, stream.status
    except StreamNotFoundError:
        last_sequence, stream_status = 0, record.status
    pending: list[PendingCall] = []
    # A root whose turn is over may head a paused tree (a child running on its own paused).
    if record.status == "paused_awaiting_client" or (
        record.is_root and stream_status == "paused_awaiting_client"
    ):
        paused = await paused_tree(store, registry, record)
        pending = [entry.pending for entry in paused.waiting]
    position = await store.queue_position(session_id) if record.status == "queued" else None
    return SessionStatusView(
        session_id=record.session_id,
        agent_type=record.agent_type,
        status=record.status,
        step_count=record.step_count,
        output=record.output,
        error=record.error,
        failure_reason=record.failure_reason,
        queue_position=position,
        stream_id=record.stream_id,
        last_sequence=last_sequence,
        parent_session_id=record.parent_session_id,
        sub_sessions=refs,
        pending_calls=pending,
        usage=UsageView(input_tokens=record.input_tokens, output_tokens=record.output_tokens),
    )


async def session_status_tree(
    store: StateStore, registry: AgentRegistry, session_id: str, *, depth: int | None = None
) -> SessionTreeView:
    """The session's status with its whole tree (to `depth` levels of children, all when
    None) and the tree's summed usage."""
    view = await session_status(store, registry, session_id)
    record = await store.get_session(session_id)
    tree, usage = await session_tree(store, record, depth=depth)
    return SessionTreeView(**view.__dict__, tree=tree, tree_usage=usage)


async def session_tree(
    store: StateStore, record: SessionRecord, *, depth: int | None = None
) -> tuple[TreeNode, UsageTotals]:
    """The tree under `record` to `depth` levels of children (all when None) and the usage of
    the whole tree, whatever the depth."""
    limit = MAX_DEPTH if depth is None else min(depth, MAX_DEPTH)
    members = await store.list_stream_sessions(record.stream_id)
    children: dict[str, list[SessionRecord]] = {}
    for member in members:
        if member.parent_session_id is not None:
            children.setdefault(member.parent_session_id, []).append(member)
    usage = [0, 0]

    def count(node: SessionRecord) -> None:
        usage[0] += node.input_tokens
        usage[1] += node.output_tokens
        for child in children.get(node.session_id, []):
            count(child)

    count(record)

    async def build(node: SessionRecord, ref: SubSessionRef | None, level: int) -> TreeNode:
        kids: list[TreeNode] = []
        refs = await store.get_sub_session_refs(node.session_id)
        if level < limit:
            local = {child.session_id: child for child in children.get(node.session_id, [])}
            for child_ref in refs:
                found = local.pop(child_ref.sub_session_id, None)
                if found is None:
                    kids.append(_from_ref(child_ref))
                else:
                    kids.append(await build(found, child_ref, level + 1))
            for orphan in local.values():  # a child whose ref has not landed yet
                kids.append(await build(orphan, None, level + 1))
        return _node(node, ref, kids, truncated=level >= limit and bool(refs))

    # The top of the tree shown may be a child: its node says how its parent holds it.
    top_ref = None
    if record.parent_session_id is not None:
        held = await store.get_sub_session_refs(record.parent_session_id)
        top_ref = next((ref for ref in held if ref.sub_session_id == record.session_id), None)
    tree = await build(record, top_ref, 0)
    return tree, UsageTotals(input_tokens=usage[0], output_tokens=usage[1])


def _node(
    record: SessionRecord, ref: SubSessionRef | None, children: list[TreeNode], *, truncated: bool
) -> TreeNode:
    return TreeNode(
        session_id=record.session_id,
        agent_type=record.agent_type,
        status=record.status,
        step_count=record.step_count,
        output=record.output,
        error=record.error,
        failure_reason=record.failure_reason,
        parent_tool_call_id=None if ref is None else ref.parent_tool_call_id,
        mode="ephemeral" if ref is None else ref.mode,
        name=None if ref is None else ref.name,
        remote=None if ref is None else ref.remote,
        usage=UsageTotals(input_tokens=record.input_tokens, output_tokens=record.output_tokens),
        children=children,
        truncated=truncated,
    )


def _from_ref(ref: SubSessionRef) -> TreeNode:
    return TreeNode(
        session_id=ref.sub_session_id,
        agent_type=ref.agent_type,
        status=ref.status,
        parent_tool_call_id=ref.parent_tool_call_id,
        mode=ref.mode,
        name=ref.name,
        remote=ref.remote,
    )
