"""The read stage of a pass: the metadata sources, read into what the agent believes.

Every pass reads the metadata root, the hints and the config drive (``files.read_sources``,
on the reads' worker when there is one) and folds them into the belief (``core.sources``):
the last good content of each file stays. A read that does not finish in time keeps what is
known and says so; what a read left out, and a ConfigMap's index of origins
(``schema/origins``), are kept for the status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kvdev.errors import Problem
from kvdev.guest.adapters import files, walk
from kvdev.guest.adapters.config import AgentConfig
from kvdev.guest.adapters.deadline import Deadline, Late
from kvdev.guest.core import sources
from kvdev.guest.core.observed import RawFile
from kvdev.guest.core.status import ClaimStatus, Condition
from kvdev.schema.origins import SOURCES_KEY, Origins, read_index
from kvdev.schema.reading import DeviceMetadata

log = logging.getLogger("kvdev.agent")

Reads = Deadline[tuple[list[RawFile], bool]]


@dataclass
class Intake:
    """The belief, and what the last read of the sources could not do."""

    belief: sources.Sources = field(default_factory=sources.Sources)
    limits: tuple[Problem, ...] = ()  # what the last read of the metadata tree left out
    unavailable: tuple[str, ...] = ()  # why the last read could not read the metadata at all
    origins: Origins = field(default_factory=Origins)  # a ConfigMap's streams: driver or rebuilt
    index_problem: Problem | None = None  # why the ConfigMap's sources index was not read

    def read(
        self,
        cfg: AgentConfig,
        bounds: walk.Bounds,
        reads: Reads | None,
        before: Callable[[], object],
        lap: Callable[[str], None],
    ) -> None:
        """Read the sources (``before`` first, on ``reads``' thread when given) into the belief.

        ``lap`` ends the pass's "read" phase once the files are read.
        """
        limits: list[Problem] = []
        unavailable: list[str] = []
        under = str(cfg.metadata_root).rstrip("/") + "/"  # content read from the root: a root
        expected = any(e.source.startswith(under) for e in self.belief.entries)  # gone is a gap
        volume = [False]  # the root is a ConfigMap volume (read() says)

        def read() -> tuple[list[RawFile], bool]:  # on the reads' thread when there is one
            before()
            raws, complete = files.read_sources(
                cfg.metadata_root,
                cfg.hints_path,
                cfg.config_drive,
                bounds=bounds,
                on_limit=limits.append,
                root_expected=expected,
                on_unavailable=unavailable.append,
            )
            volume[0] = files.is_configmap_volume(cfg.metadata_root)
            return raws, complete

        result = read() if reads is None else reads.run(read)
        lap("read")
        if isinstance(result, Late):  # a share that stopped answering: keep what we know
            why = f"{cfg.metadata_root} not read: {result.message}; the last good state stays"
            self.unavailable = (why,)
            return
        self.limits, self.unavailable = tuple(limits), tuple(unavailable)
        self.belief = sources.update(self.belief, result[0], listing_complete=result[1])
        before_problem = self.index_problem
        self.origins, self.index_problem = _origins_of(result[0], configmap=volume[0])
        if self.index_problem is not None and self.index_problem != before_problem:
            log.warning("%s", self.index_problem)  # once, not on every pass

    def errors(self) -> tuple[Problem, ...]:
        """The metadata's problems: files, rejected devices, conflicting hints, the index."""
        errors = [p for problems in self.belief.errors().values() for p in problems]
        errors.extend(self.belief.device_rejections())
        errors.extend(self.belief.hint_conflicts())
        if self.index_problem is not None:
            errors.append(self.index_problem)
        return tuple(errors)

    def conditions(self) -> list[Condition]:
        """What the last read could not do (``MetadataTruncated``, ``MetadataUnavailable``)."""
        out = [Condition("MetadataTruncated", p.message, p.severity) for p in self.limits]
        out.extend(Condition("MetadataUnavailable", why) for why in self.unavailable)
        return out

    def claims(self) -> tuple[ClaimStatus, ...]:
        """Per metadata file in force: the claim and the generation acted on."""
        out = []
        for entry in self.belief.entries:
            doc = entry.used.document if entry.used is not None else None
            if isinstance(doc, DeviceMetadata) and entry.used is not None:
                namespace = doc.metadata.namespace if doc.metadata else None
                out.append(
                    ClaimStatus(
                        doc.claim,
                        namespace,
                        doc.pod_claim_name,
                        doc.generation,
                        entry.source,
                        entry.used.api_version,
                        entry.used.fallback,
                        self.origins.label(entry.source.rsplit("/", 1)[-1]),
                    )
                )
        return tuple(out)


def _origins_of(raws: list[RawFile], *, configmap: bool) -> tuple[Origins, Problem | None]:
    """The streams' origins a ConfigMap volume's index says (read as data: ``schema/origins``).

    A tree (not a ConfigMap volume): not known. A volume without an index (an older
    controller): every stream is the reconstruction. An index that cannot be read or does not
    parse, an empty one included, is its problem (a metadata error naming the key and the
    field); the origins are then not known.
    """
    if not configmap:
        return Origins(), None
    index = next((r for r in raws if r.source.rsplit("/", 1)[-1] == SOURCES_KEY), None)
    if index is None:
        return Origins(configmap=True), None
    if index.data is None:
        return Origins(), index.problem
    return read_index(index.data, index.source)
