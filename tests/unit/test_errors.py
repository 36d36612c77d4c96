"""The error tree: every kvdev error is permanent or retryable, and one errno map for writers."""

import errno
import importlib
import inspect
import pkgutil

import pytest

import kvdev
from kvdev.errors import (
    RETRYABLE_ERRNOS,
    KvdevError,
    PermanentError,
    RetryableError,
    os_error,
)


def kvdev_error_classes():
    for info in pkgutil.walk_packages(kvdev.__path__, "kvdev."):
        if "proto" in info.name or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, KvdevError) and obj.__module__ == module.__name__:
                yield obj


def test_every_error_class_is_permanent_or_retryable_and_drawn_in_the_tree():
    classes = set(kvdev_error_classes())
    assert len(classes) >= 17  # the tree in errors.py's docstring
    doc = inspect.getdoc(importlib.import_module("kvdev.errors"))
    for cls in classes - {KvdevError, PermanentError, RetryableError}:
        assert cls.__name__ in doc, f"{cls.__module__}.{cls.__name__} is not drawn"
        abstract = cls.__name__ in {"AgentError", "AnsweredError", "KubeError"}
        if not abstract:
            assert issubclass(cls, PermanentError) != issubclass(cls, RetryableError), cls
            assert cls.retryable is issubclass(cls, RetryableError)


@pytest.mark.parametrize(
    ("number", "kind"),
    [
        (errno.ENOSPC, RetryableError),  # freeing space is the remedy; decided once, here
        (errno.EDQUOT, RetryableError),
        (errno.EAGAIN, RetryableError),
        (errno.EIO, RetryableError),
        (errno.EROFS, PermanentError),
        (errno.EACCES, PermanentError),
        (errno.ENOTDIR, PermanentError),
        (errno.EISDIR, PermanentError),
        (errno.ENAMETOOLONG, PermanentError),
    ],
)
def test_one_errno_map_for_every_writer(number, kind):
    error = os_error(OSError(number, "why"), "write", "/x/y")
    assert type(error) is kind
    assert str(error) == "cannot write /x/y: why"
    assert (number in RETRYABLE_ERRNOS) is (kind is RetryableError)


def disk_full(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_is_retryable_for_the_link_files_and_both_host_writers(tmp_path, monkeypatch):
    from kvdev.guest.adapters import linkfiles  # noqa: PLC0415
    from kvdev.guest.core import steps  # noqa: PLC0415
    from kvdev.host import fs  # noqa: PLC0415
    from kvdev.host.bundle import writer as bundle_writer  # noqa: PLC0415

    step = steps.WriteLinkFile(
        device="d", ifindex=3, ifname="eth1", reason="r", path=str(tmp_path / "a.link"), content=""
    )
    monkeypatch.setattr(linkfiles, "write_atomic", disk_full)
    result = linkfiles.apply(step)
    assert (result.ok, result.retryable) == (False, True)
    assert result.error == f"cannot write {tmp_path}/a.link: No space left on device"

    monkeypatch.setattr(fs, "write_atomic", disk_full)
    with pytest.raises(RetryableError, match="No space left on device"):
        fs.write(tmp_path / "metadata.json", b"{}")

    monkeypatch.setattr(bundle_writer.os, "write", disk_full)
    with pytest.raises(RetryableError, match="No space left on device"):
        bundle_writer.publish(tmp_path / "out", lambda _old: {"a/b.json": b"{}"})
    assert not (tmp_path / "out" / "current").exists()
