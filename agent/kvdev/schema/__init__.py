"""The metadata contract shared by kvdev's host and guest halves.

Modules, lowest first (each imports only those above it):

* ``fields``      value syntax: Kubernetes names, PCI, MAC, IP, interface names
* ``gojson``      JSON text as Go's encoding/json writes it (upstream's writer's bytes)
* ``plain``       the plain decoder: JSON data to frozen values, problems by field path
* ``metadata``    upstream KEP-5304 DeviceMetadata (v1beta1, v1alpha1): the writer's rules
* ``reading``     DeviceMetadata as upstream's reader accepts it, and ``conformance``
* ``hints``       kvdev's GuestHints kind
* ``configdrive`` KubeVirt's config-drive ``devices[]``
* ``described``   the normalized per-device view
* ``stream``      versioned JSON stream reader and writer
* ``tree``        the metadata tree layout
* ``documents``   one file's bytes in, one checked result out

The whole package is pure (no I/O, no clocks, no environment) and imports no pydantic: the
guest reads with it alone, and the host builds and writes its documents with the same values.
The tests judge it by pydantic models of the same documents (``tests/pydantic_schema``).

Names are loaded on first use (PEP 562): importing one module of the package (the host's
allocator needs ``metadata`` alone) does not load the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvdev.schema.configdrive import ConfigDriveMetadata, TaggedDevice
    from kvdev.schema.described import DescribedDevice, describe
    from kvdev.schema.documents import FileResult, check_file, sniff_role
    from kvdev.schema.hints import GuestHints
    from kvdev.schema.reading import DeviceMetadata
    from kvdev.schema.stream import (
        DEVICE_METADATA,
        GUEST_HINTS,
        Decoded,
        DocumentKind,
        decode_document,
        decode_stream,
        encode_stream,
    )
    from kvdev.schema.tree import MetadataLocation, Role, metadata_location, role_of

_WHERE = {
    "ConfigDriveMetadata": "configdrive",
    "TaggedDevice": "configdrive",
    "DescribedDevice": "described",
    "describe": "described",
    "FileResult": "documents",
    "check_file": "documents",
    "sniff_role": "documents",
    "GuestHints": "hints",
    "DeviceMetadata": "reading",
    "DEVICE_METADATA": "stream",
    "GUEST_HINTS": "stream",
    "Decoded": "stream",
    "DocumentKind": "stream",
    "decode_document": "stream",
    "decode_stream": "stream",
    "encode_stream": "stream",
    "MetadataLocation": "tree",
    "Role": "tree",
    "metadata_location": "tree",
    "role_of": "tree",
}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "DEVICE_METADATA",
    "GUEST_HINTS",
    "ConfigDriveMetadata",
    "Decoded",
    "DescribedDevice",
    "DeviceMetadata",
    "DocumentKind",
    "FileResult",
    "GuestHints",
    "MetadataLocation",
    "Role",
    "TaggedDevice",
    "check_file",
    "decode_document",
    "decode_stream",
    "describe",
    "encode_stream",
    "metadata_location",
    "role_of",
    "sniff_role",
]
