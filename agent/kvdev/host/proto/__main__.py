"""Regenerate the committed gRPC/protobuf stubs of ``kvdev.host.proto`` (``make proto``).

Runs grpcio-tools' bundled protoc with the mypy-protobuf plugins (both in the ``dev`` extra)
over this package's .proto files. ``--out DIR`` writes the tree somewhere else instead (the
test that checks the committed stubs are current diffs such a tree against them). Development
tool only: the running plugin never imports this module.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_ROOT = _PACKAGE.parents[2]  # the source root ``agent/``: imports read ``kvdev.host.proto.x``


def protoc_args(out: Path) -> list[str]:
    """The protoc command line that writes the stubs under ``out`` (a source root)."""
    plugins = []
    for name in ("protoc-gen-mypy", "protoc-gen-mypy_grpc"):
        found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
        if found is None:
            raise SystemExit(f"{name} not found: pip install mypy-protobuf (the dev extra)")
        plugins.append(f"--plugin={name}={found}")
    protos = sorted(str(p.relative_to(_ROOT)) for p in _PACKAGE.glob("*.proto"))
    return [
        "protoc",
        *plugins,
        f"-I{_ROOT}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        *protos,
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Generate the stubs; returns protoc's exit status."""
    parser = argparse.ArgumentParser(prog="python -m kvdev.host.proto", description=__doc__)
    parser.add_argument("--out", type=Path, default=_ROOT, help="source root to write under")
    args = parser.parse_args(argv)
    try:
        from grpc_tools import protoc  # noqa: PLC0415 - dev-only dependency
    except ImportError as e:
        raise SystemExit(f"grpcio-tools is not installed (the dev extra): {e}") from e
    args.out.mkdir(parents=True, exist_ok=True)
    status: int = protoc.main(protoc_args(args.out.resolve()))
    return status


if __name__ == "__main__":
    sys.exit(main())
