r"""Parse Kubernetes objects from YAML or JSON text.

Owns multi-document streams and ``kind: List``, dispatching on apiVersion/kind, and turning
errors into Problems that name the source, the object and the field path.

Hostile text is bounded: libyaml refuses nesting deeper than 1000, a number too long for
Python's int conversion is an error naming the source, and a stream whose YAML aliases expand
to more values than the text has characters (an alias bomb: ~10 lines can stand for 10**9
values) is refused before anything walks or serializes the expansion.

JSON text is read as Go's ``encoding/json`` reads it where libyaml would refuse it: a
``\uD83D\uDE00`` surrogate-pair escape is the astral character it stands for, and a lone
surrogate escape is U+FFFD (``_json_surrogates``, before libyaml sees the text).

Takes text, does no I/O (see ``kvdev.host.commands.inputs`` for files).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import yaml
from pydantic import ValidationError

from kvdev.errors import Problem, SchemaError, Severity
from kvdev.host.k8s.claim import ResourceClaim, ResourceClaimTemplate
from kvdev.host.k8s.core import ConfigMap, Node, Pod
from kvdev.host.k8s.kubevirt import API_VERSION as KUBEVIRT_API_VERSION
from kvdev.host.k8s.kubevirt import KIND as VMI_KIND
from kvdev.host.k8s.kubevirt import VirtualMachineInstance
from kvdev.host.k8s.model import Document, problems_from
from kvdev.host.k8s.resource import (
    API_VERSION,
    DeviceClass,
    DeviceTaintRule,
    ResourceSlice,
)
from kvdev.host.k8s.scheduling import API_VERSIONS as SCHEDULING_VERSIONS
from kvdev.host.k8s.scheduling import PodGroup

# libyaml's safe loader when PyYAML has it: ~8x faster on big `kubectl get -o yaml` dumps.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_JSON_START = re.compile(r"\s*[{\[]")
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_ESCAPES = re.compile(
    r"(\\\\)"  # an escaped backslash: what follows it is no escape
    r"|\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})"  # a pair
    r"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"  # a lone surrogate
)
_EXPANSION_SLACK = 10_000  # values allowed beyond the text's length (small files, aliases)

K8sObject = (
    DeviceClass
    | ResourceSlice
    | ResourceClaim
    | ResourceClaimTemplate
    | DeviceTaintRule
    | Node
    | Pod
    | PodGroup
)

KINDS: dict[tuple[str, str], type[K8sObject]] = {
    (API_VERSION, "DeviceClass"): DeviceClass,
    (API_VERSION, "ResourceSlice"): ResourceSlice,
    (API_VERSION, "ResourceClaim"): ResourceClaim,
    (API_VERSION, "ResourceClaimTemplate"): ResourceClaimTemplate,
    (API_VERSION, "DeviceTaintRule"): DeviceTaintRule,
    ("v1", "Node"): Node,
    ("v1", "Pod"): Pod,
    **{(version, "PodGroup"): PodGroup for version in SCHEDULING_VERSIONS},
}

ControllerObject = K8sObject | VirtualMachineInstance | ConfigMap

KUBEVIRT_KINDS: dict[tuple[str, str], type[ControllerObject]] = {
    **KINDS,
    (KUBEVIRT_API_VERSION, VMI_KIND): VirtualMachineInstance,
    ("v1", "ConfigMap"): ConfigMap,
}
"""What ``kvdev-host controller`` reads: ``KINDS`` plus KubeVirt VMIs and ConfigMaps."""

_O = TypeVar("_O", bound=Document)


class SkippedObjectWarning(UserWarning):
    """An object of a kind kvdev does not read was skipped."""


def describe(value: dict[str, Any]) -> str:
    """``Kind/name`` or ``Kind/namespace/name`` for messages."""
    kind = value.get("kind") or "?"
    meta = value.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name") or "?"
    namespace = meta.get("namespace")
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def load_with_warnings(text: str, source: str) -> tuple[list[K8sObject], list[Problem]]:
    """Parse every supported object in ``text``; return them and the warnings.

    Raises:
        SchemaError: the text is not YAML/JSON, or a supported object is invalid; every
            invalid object of the stream is reported.
    """
    return load_kinds(text, source, KINDS)


def load_kinds(
    text: str, source: str, kinds: Mapping[tuple[str, str], type[_O]]
) -> tuple[list[_O], list[Problem]]:
    """Parse every object of ``kinds`` in ``text``; return them and the warnings.

    Raises:
        SchemaError: as ``load_with_warnings``.
    """
    text = _json_surrogates(text)
    try:
        documents = list(yaml.load_all(text, Loader=_LOADER))
    except yaml.YAMLError as e:
        raise SchemaError([_yaml_problem(e, source)]) from e
    except ValueError as e:  # int("9" * 5000): Python's integer string conversion limit
        detail = str(e).split(";", 1)[0]
        raise SchemaError([Problem(f"invalid YAML/JSON number: {detail}", source)]) from e
    if "&" in text:  # aliases need an anchor: without one, values <= characters already
        _check_expansion(documents, len(text) + _EXPANSION_SLACK, source)
    out: _Found[_O] = _Found(kinds)
    for index, document in enumerate(documents):
        if document is None:
            continue
        _collect(document, source, index, "", out)
    if out.errors:
        raise SchemaError(out.errors)
    return out.objects, out.warnings


def load(text: str, source: str) -> list[K8sObject]:
    """Parse every supported object in ``text``; skipped kinds are reported as warnings.

    Raises:
        SchemaError: as ``load_with_warnings``.
    """
    objects, found = load_with_warnings(text, source)
    for problem in found:
        warnings.warn(str(problem), SkippedObjectWarning, stacklevel=2)
    return objects


@dataclass
class _Found(Generic[_O]):
    """What a walk may read, and what it found."""

    kinds: Mapping[tuple[str, str], type[_O]]
    objects: list[_O] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)


def _collect(value: object, source: str, index: int, prefix: str, out: _Found[_O]) -> None:
    if not isinstance(value, dict):
        out.errors.append(Problem("expected an object", source, index, prefix))
        return
    api, kind = value.get("apiVersion"), value.get("kind")
    if not isinstance(api, str) or not isinstance(kind, str):
        out.errors.append(Problem("apiVersion and kind must be strings", source, index, prefix))
        return
    if kind == "List" or (kind.endswith("List") and isinstance(value.get("items"), list)):
        items = value.get("items")
        if not isinstance(items, list):
            out.errors.append(
                Problem("items must be a list", source, index, _join(prefix, "items"))
            )
            return
        for i, item in enumerate(items):
            where = f"{_join(prefix, 'items')}[{i}]"
            _collect(item, source, index, where, out)
        return
    model = out.kinds.get((api, kind))
    if model is None:
        out.warnings.append(
            Problem(
                f"{describe(value)}: skipped, kvdev does not read {api} {kind}",
                source,
                index,
                prefix,
                Severity.WARNING,
            )
        )
        return
    try:
        out.objects.append(model.model_validate(value, strict=True))
    except ValidationError as e:
        out.errors.extend(
            Problem(
                f"{describe(value)}: {p.message}", source, index, _join(prefix, p.path), p.severity
            )
            for p in problems_from(e, source=source, index=index)
        )


def _json_surrogates(text: str) -> str:
    r"""JSON ``text`` with its surrogate escapes as Go decodes them, in YAML's escapes.

    libyaml refuses ``\uD800``-``\uDFFF``; Go's ``encoding/json`` reads a high and low pair as
    one character and any other surrogate as U+FFFD. Only JSON text is rewritten (text with
    such an escape is checked with ``json`` first: YAML, a flow mapping too, is left to libyaml,
    as before): there every backslash is inside a double-quoted string, so an escape is exactly
    a backslash not itself escaped.
    """
    if not _JSON_START.match(text) or not _SURROGATE.search(text):
        return text
    try:
        json.loads(text)
    except ValueError:  # YAML, or no valid JSON: libyaml says what it says
        return text

    def rewrite(m: re.Match[str]) -> str:
        if m[1] is not None:
            return m[1]
        if m[2] is None:
            return "\\uFFFD"
        high, low = int(m[2], 16), int(m[3], 16)
        return f"\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08X}"

    return _ESCAPES.sub(rewrite, text)


def _join(prefix: str, path: str) -> str:
    if not prefix:
        return path
    if not path:
        return prefix
    return prefix + ("" if path.startswith("[") else ".") + path


def _check_expansion(documents: list[Any], limit: int, source: str) -> None:
    budget = limit
    stack = list(documents)
    while stack:
        value = stack.pop()
        budget -= 1
        if budget < 0:
            raise SchemaError(
                [
                    Problem(
                        f"YAML aliases expand to more than {limit:,} values (the text has "
                        f"{limit - _EXPANSION_SLACK:,} characters); refusing an alias bomb",
                        source,
                    )
                ]
            )
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def _yaml_problem(error: yaml.YAMLError, source: str) -> Problem:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    what = getattr(error, "problem", None) or str(error)
    if mark is not None:
        return Problem(
            f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {what}", source
        )
    return Problem(f"invalid YAML: {what}", source)
