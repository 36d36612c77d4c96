"""The kubernetes client every kvdev-host component uses (through ``kube.wire``).

Owns: its configuration (a kubeconfig when one is named; else the in-cluster service account,
falling back to the default kubeconfig), ``api_client`` (an ``ApiClient`` whose every request,
watches included, first takes a token of a ``ratelimit.TokenBucket``: ``--kube-api-qps`` and
``--kube-api-burst``) and ``unreachable`` (one short line for a transport error: the endpoint
and the reason, not urllib3's nested reprs). Imports the client only when called (the host
extra, needed only live).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kvdev.errors import PermanentError
from kvdev.host.ratelimit import TokenBucket


def api_client(
    kubeconfig: Path | None, bucket: TokenBucket | None = None, connections: int | None = None
) -> Any:  # noqa: ANN401 - the client is untyped
    """A ``kubernetes.client.ApiClient``; with ``bucket``, every request waits for a token.

    ``connections``: keep at least that many connections to the API server open for reuse
    (the client's default is 5 per CPU; a busy pool past it opens and drops connections).

    Raises:
        PermanentError: no configuration can be loaded (see ``configuration``).
    """
    from kubernetes import client  # noqa: PLC0415

    loaded = configuration(kubeconfig)
    if connections is not None:
        loaded.connection_pool_maxsize = max(loaded.connection_pool_maxsize, connections)
    api = client.ApiClient(loaded)
    if bucket is not None:
        throttle(api, bucket)
    return api


def throttle(api: Any, bucket: TokenBucket) -> None:  # noqa: ANN401 - the client is untyped
    """Make ``api`` (an ApiClient) take a token before each request it sends.

    Its ``rest_client.request`` is the one call every API method (and the watch) goes through,
    in the client's older layout (``ApiClient.request`` -> ``GET`` ...) and in its newer one.
    """
    rest = api.rest_client
    send = rest.request

    def limited(*args: object, **kwargs: object) -> Any:  # noqa: ANN401 - the client's response
        bucket.wait()
        return send(*args, **kwargs)

    rest.request = limited


def unreachable(endpoint: str, error: BaseException) -> str:
    """``API server https://h:p unreachable: connection refused``: one line, no reprs."""
    return f"API server {endpoint} unreachable: {short_reason(error)}"


def short_reason(error: BaseException) -> str:
    """The root cause of a transport error in a few words (an errno's text, a timeout...)."""
    chain: list[BaseException] = []
    todo = [error]
    while todo:
        e = todo.pop(0)
        if any(e is seen for seen in chain):
            continue
        chain.append(e)
        reason = getattr(e, "reason", None)
        nested = [a for a in e.args if isinstance(a, BaseException)]
        linked = (reason, e.__cause__, e.__context__, *nested)
        todo += [x for x in linked if isinstance(x, BaseException)]
    for e in chain:
        if isinstance(e, OSError) and e.errno:
            return os.strerror(e.errno).lower()
    for e in chain:
        if isinstance(e, TimeoutError) or "Timeout" in type(e).__name__:
            return "timed out"
    last = chain[-1]
    text = str(last).split(": ")[-1].strip() or type(last).__name__
    return text[:200]


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
