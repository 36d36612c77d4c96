"""The kubernetes client's configuration, for ``controller.kube`` and ``plugin.kube`` alike.

A kubeconfig when one is named; else the in-cluster service account, falling back to the
default kubeconfig. Imports the client only when called (the host extra, needed only live).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kvdev.errors import PermanentError


def configuration(kubeconfig: Path | None) -> Any:  # noqa: ANN401 - the client is untyped
    """A loaded ``kubernetes.client.Configuration``.

    Raises:
        PermanentError: no configuration can be loaded, naming where it looked.
    """
    from kubernetes import client  # noqa: PLC0415
    from kubernetes import config as kube_config  # noqa: PLC0415

    config: Any = kube_config  # its loaders are untyped
    loaded = client.Configuration()
    try:
        if kubeconfig is not None:
            _exists(kubeconfig, "--kubeconfig")
            config.load_kube_config(config_file=str(kubeconfig), client_configuration=loaded)
        else:
            try:
                config.load_incluster_config(client_configuration=loaded)
            except config.ConfigException:
                paths = default_kubeconfigs()
                if not any(p.is_file() for p in paths):
                    names = ", ".join(map(str, paths))
                    msg = f"no in-cluster service account, and no kubeconfig file at {names}"
                    raise PermanentError(msg + " (name one with --kubeconfig)") from None
                config.load_kube_config(client_configuration=loaded)
    except (config.ConfigException, OSError, ValueError) as e:
        where = kubeconfig or "in-cluster config or the default kubeconfig"
        raise PermanentError(f"{where}: cannot configure the Kubernetes client: {e}") from e
    return loaded


def default_kubeconfigs() -> list[Path]:
    """The files the client reads without ``--kubeconfig``: $KUBECONFIG's, else ~/.kube/config."""
    named = os.environ.get("KUBECONFIG", "").split(os.pathsep)
    listed = [Path(p).expanduser() for p in named if p]
    return listed or [Path("~/.kube/config").expanduser()]


def _exists(path: Path, what: str) -> None:
    """PermanentError naming ``path`` when it is not a file.

    (The client would only say "Invalid kube-config file. No configuration found.")
    """
    if not path.is_file():
        why = "is not a file" if path.exists() else "no such file"
        raise PermanentError(f"{what} {path}: {why}")
