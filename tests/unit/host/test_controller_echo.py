"""An event the controller's cache already holds (same key, same resourceVersion: above all the
echo of its own write) is not parsed again: each echo of the start's creates cost a full model
validation (10,000 at 10,000 VMIs), while the first claim change waited (README's benchmark)."""

import threading

from kvdev.host.controller import reflector as reflector_module
from kvdev.host.controller.index import Kind
from kvdev.host.controller.reflector import Reflector


def configmap(version):
    return {"metadata": {"name": "kvdev-vm1", "namespace": "vms", "resourceVersion": version}}


def test_a_known_version_is_neither_parsed_nor_sunk(monkeypatch):
    parsed, sunk = [], []
    real = reflector_module.parse
    monkeypatch.setattr(
        reflector_module, "parse", lambda kind, raw: parsed.append(raw) or real(kind, raw)
    )
    known = {("vms", "kvdev-vm1"): "7"}
    r = Reflector(
        api=None,
        kind=Kind.CONFIGMAP,
        sink=sunk.append,
        stop=threading.Event(),
        known=lambda _kind, key, version: known.get(key) == version,
    )
    r._event({"type": "ADDED", "object": configmap("7")})
    assert (parsed, sunk, r.resource_version) == ([], [], "7")
    r._event({"type": "MODIFIED", "object": configmap("8")})
    assert len(parsed) == 1
    assert len(sunk) == 1
    r._event({"type": "DELETED", "object": configmap("7")})  # a delete is never skipped
    assert len(sunk) == 2
