"""Where the kubelet plugin gets a claim's objects: the ``ClaimSource`` seam and its file source.

Kubelet's NodePrepareResources names a claim (namespace, name, UID) but does not send it: the
plugin fetches the ResourceClaim and the driver's ResourceSlices through a ``ClaimSource``.
``FileClaimSource`` reads them from a directory of YAML/JSON files, re-read on every call (for
tests, demos and nodes without API access); ``kvdev.host.plugin.liveclaims.KubeClaimSource``
asks the API server. This module must not write anything nor talk to the network.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kvdev.errors import PermanentError, Problem, SchemaError, TransientReadError
from kvdev.host.k8s import K8sObject, ResourceClaim, ResourceSlice
from kvdev.host.k8s.load import load_with_warnings

SUFFIXES = (".yaml", ".yml", ".json")


class ClaimNotFoundError(PermanentError):
    """The claim kubelet named does not exist (or no longer exists) in the source."""


class ClaimUidMismatchError(PermanentError):
    """The claim found under kubelet's name has another UID (deleted and re-created?)."""


@dataclass(frozen=True, slots=True)
class Fetched:
    """A claim and the ResourceSlices of the plugin's driver, read at the same time."""

    claim: ResourceClaim
    slices: tuple[ResourceSlice, ...]


class ClaimSource(Protocol):
    """Fetch one claim and the driver's slices; implementations must be thread-safe."""

    def fetch(self, namespace: str, name: str) -> Fetched:
        """The claim ``namespace/name`` and the driver's slices.

        Raises:
            ClaimNotFoundError: no such claim.
            SchemaError: the claim or a slice is invalid (names the object and field).
            RetryableError: the source could not be read right now.
            PermanentError: the source is misconfigured.
        """
        ...


class FileClaimSource:
    """A directory of ``*.yaml``/``*.yml``/``*.json`` files of claims and slices (not recursive).

    Every ``fetch`` lists the directory and stats each file again, so editing, adding or
    removing files changes what the next call sees; a file's parsed objects are reused while
    its (inode, size, mtime, ctime) stay the same (parsing YAML dominates a call otherwise).
    Other kinds are ignored; slices of other drivers are left out. Two claims with the same
    namespace and name are an error naming both files.
    """

    def __init__(self, directory: Path, driver: str) -> None:
        self.directory = directory
        self.driver = driver
        self._lock = threading.Lock()
        self._parsed: dict[Path, tuple[tuple[int, ...], list[K8sObject] | SchemaError]] = {}

    def fetch(self, namespace: str, name: str) -> Fetched:
        """See ``ClaimSource.fetch``."""
        claims: dict[tuple[str, str], tuple[ResourceClaim, str]] = {}
        slices: list[ResourceSlice] = []
        problems: list[Problem] = []
        files = self._files()
        for path in files:
            try:
                objects = self._load(path)
            except SchemaError as e:
                problems.extend(e.problems)
                continue
            for obj in objects:
                if isinstance(obj, ResourceSlice) and obj.spec.driver == self.driver:
                    slices.append(obj)
                elif isinstance(obj, ResourceClaim):
                    key = (obj.metadata.namespace or "default", obj.metadata.name)
                    if key in claims:
                        problems.append(
                            Problem(
                                f"ResourceClaim {key[0]}/{key[1]} is also defined in "
                                f"{claims[key][1]}",
                                str(path),
                            )
                        )
                    claims[key] = (obj, str(path))
        with self._lock:
            for gone in self._parsed.keys() - set(files):
                del self._parsed[gone]
        if problems:
            raise SchemaError(problems)
        found = claims.get((namespace, name))
        if found is None:
            raise ClaimNotFoundError(
                f"ResourceClaim {namespace}/{name} not found in {self.directory}"
            )
        return Fetched(found[0], tuple(slices))

    def _load(self, path: Path) -> list[K8sObject]:
        try:
            info = path.stat()
        except FileNotFoundError:
            return []  # removed since the listing: as if never listed
        except OSError as e:
            raise TransientReadError(f"{path}: {e.strerror or e}") from e
        key = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        with self._lock:
            cached = self._parsed.get(path)
        if cached is None or cached[0] != key:
            try:
                cached = (key, _load(path))
            except SchemaError as e:
                cached = (key, e)
            with self._lock:
                self._parsed[path] = cached
        if isinstance(cached[1], SchemaError):
            raise SchemaError(cached[1].problems)
        return cached[1]

    def _files(self) -> list[Path]:
        try:
            entries = sorted(self.directory.iterdir())
        except FileNotFoundError as e:
            raise PermanentError(f"{self.directory}: claims directory does not exist") from e
        except OSError as e:
            raise TransientReadError(f"{self.directory}: {e.strerror or e}") from e
        return [p for p in entries if p.suffix in SUFFIXES and p.is_file()]


def _load(path: Path) -> list[K8sObject]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []  # removed between the listing and the read: as if never listed
    except OSError as e:
        raise TransientReadError(f"{path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise SchemaError([Problem(f"not UTF-8 text: {e.reason}", str(path))]) from e
    objects, _skipped_kinds = load_with_warnings(text, str(path))
    return objects
