"""The apply stage of a pass: each journal on disk before its steps, then the steps.

Two rules of writing before applying (``core.journals`` decides what the journals hold):

* a trade of names starts only once the rename journal holds it: when it cannot be saved,
  every rename of the pass (and the link-down before it) waits, as a failed step (retryable or
  not as the error is), and the other steps go ahead;
* an altname is added only once the altname journal holds it.

Kernel steps go over netlink in one batch, link wishes to disk (``linkfiles``). The mark files
other network managers read through udev (``markfiles``) are kept before anything is renamed.
After the steps, the address journal records what was added and removed, and the altname
journal forgets what was removed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvdev.errors import os_error
from kvdev.guest.adapters import linkfiles, markfiles
from kvdev.guest.adapters.state import ADDRESSES, ALTNAMES, RENAMES, Store
from kvdev.guest.core import journals
from kvdev.guest.core.steps import (
    AddAltname,
    RemoveLinkFile,
    Rename,
    SetDown,
    Step,
    StepResult,
    WriteLinkFile,
)

log = logging.getLogger("kvdev.agent")

Send = Callable[[Sequence[Step]], list[StepResult]]


@dataclass
class Applier:
    """The journals, marks and steps of a pass, written in that order."""

    store: Store
    marked: frozenset[str] | None = None  # the marks on disk after the last sync

    def prepare(self, kept: journals.InForce, state_dir: Path, wanted: frozenset[str]) -> None:
        """Save the rename journal as pruned, and keep the mark files as ``wanted``.

        Before any rename: udev's "move" event reads the marks. A failure is unsaved state.
        """
        self.store.put(RENAMES, kept.renames)
        if wanted == self.marked and not self.store.unsaved("marks"):
            return
        path = markfiles.directory(state_dir)
        try:
            added, removed = markfiles.sync(path, wanted)
        except OSError as e:
            self.store.failed("marks", os_error(e, "keep the link marks in", path))
            return
        self.store.failed("marks", None)
        self.marked = wanted
        if added or removed:
            log.info(
                "link marks: added %s, removed %s",
                ", ".join(sorted(added)) or "none",
                ", ".join(sorted(removed)) or "none",
            )

    def apply(self, send: Send, steps: Sequence[Step], kept: journals.InForce) -> list[StepResult]:
        """Apply ``steps``: kernel ones with ``send``, link wishes on disk; journals first."""
        kernel = [s for s in steps if not isinstance(s, WriteLinkFile | RemoveLinkFile)]
        kept.renames = journals.record_renames(kept.renames, kernel)
        held: list[StepResult] = []
        error = self.store.put(RENAMES, kept.renames)  # before any rename
        if error is not None:
            held = journals.hold_renames(kernel, str(error), retryable=error.retryable)
            kernel = [s for s in kernel if not isinstance(s, Rename | SetDown)]
        adds = [s for s in kernel if isinstance(s, AddAltname)]
        if adds:
            kept.altnames = journals.record_altnames(kept.altnames, adds)
            error = self.store.put(ALTNAMES, kept.altnames)  # before any altname
            why = None if error is None else str(error)
            retryable = error is None or error.retryable
            unjournaled = journals.hold_altnames(adds, kept.altnames, why, retryable=retryable)
            waiting = {id(r.step) for r in unjournaled}
            kernel = [s for s in kernel if id(s) not in waiting]
            held.extend(unjournaled)
        results = send(kernel) if kernel else []
        results.extend(held)
        results.extend(
            linkfiles.apply(s) for s in steps if isinstance(s, WriteLinkFile | RemoveLinkFile)
        )
        return results

    def settle(
        self, kept: journals.InForce, results: Sequence[StepResult], *, keeps_proto: bool
    ) -> None:
        """Save the address and altname journals after ``results``.

        The address journal stays empty on a kernel that keeps IFA_PROTO.
        """
        added = {} if keeps_proto else journals.record_addresses(kept.addresses, results)
        self.store.put(ADDRESSES, added)
        self.store.put(ALTNAMES, journals.forget_altnames(kept.altnames, results))
