"""Every tree this process runs (`Trees`), by root id, and the renewal of their leases: the
registry of trees, apart from one tree as this process runs it (`app.runtime.tree`). See
docs/architecture.md, "Trees and leases".
"""

from __future__ import annotations

import logging
from time import monotonic
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.runtime.session import SessionRun
    from app.runtime.tree import Tree
    from app.store import StateStore

logger = logging.getLogger(__name__)


class Trees:
    """Every tree this process runs, by root id, and the renewal of their leases."""

    def __init__(self) -> None:
        self._trees: dict[str, Tree] = {}

    def __contains__(self, root_id: object) -> bool:
        return root_id in self._trees

    def __len__(self) -> int:
        return len(self._trees)

    def get(self, root_id: str) -> Tree | None:
        """The tree of this root, if it runs here."""
        return self._trees.get(root_id)

    def add(self, tree: Tree) -> Tree:
        """Run `tree` here."""
        assert tree.root_id not in self._trees, tree.root_id
        self._trees[tree.root_id] = tree
        return tree

    def forget(self, tree: Tree) -> None:
        """The tree no longer runs here."""
        if self._trees.get(tree.root_id) is tree:
            del self._trees[tree.root_id]

    def find_run(self, session_id: str) -> SessionRun | None:
        """The run of a session running here, in whichever tree."""
        for tree in self._trees.values():
            run = tree.find(session_id)
            if run is not None:
                return run
        return None

    def give_up_all(self, why: str) -> None:
        """Stop every tree here without another write."""
        for tree in list(self._trees.values()):
            tree.give_up(why)

    async def renew(self, store: StateStore, owner_id: str, lease_ms: int) -> None:
        """Renew the leases of every tree here; give up those that are lost, or that went
        unrenewed too long when the store does not answer."""
        roots = list(self._trees)
        if not roots:
            return
        asked_at = monotonic()
        try:
            held = await store.renew_leases(owner_id, roots, lease_ms)
        except Exception:
            logger.exception("Renewing session leases failed")
            for root in roots:
                tree = self._trees.get(root)
                if tree is not None and not tree.holds_lease():
                    tree.give_up("its lease could not be renewed in time")
            return
        for root in roots:
            tree = self._trees.get(root)
            if tree is None:
                continue
            if root in held:
                tree.leased(asked_at)
            else:
                tree.give_up("its lease was lost (another server may run it now)")
