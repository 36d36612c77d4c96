"""A symlinked metadata root re-pointed non-atomically (``rm; ln -s``, BusyBox ``ln -sf``).

The re-point lands inside a resolution, deterministically: ``os.readlink`` of the root link is
wrapped so that the link is removed (or replaced by a directory) after ``realpath`` saw it as a
link and before it reads it, and made again afterwards. No timing: the hook runs the real file
system operations at the one moment that used to break (issue 23 §3, second bullet).
"""

import dataclasses
import os
import shutil

import pytest

from kvdev.guest.adapters import files, fspoll
from kvdev.guest.reconciler import Reconciler, converge
from memlab import example_config, example_kernel


@pytest.fixture
def linked(tmp_path):
    """The example tree as generation ``gen1``, reached through the link ``current``."""
    cfg = example_config(tmp_path, gpu=False)
    gen1 = tmp_path / "gen1"
    cfg.metadata_root.rename(gen1)
    shutil.copytree(gen1, tmp_path / "gen2")
    current = tmp_path / "current"
    current.symlink_to(gen1)
    return dataclasses.replace(cfg, metadata_root=current)


def repoint_inside_readlink(monkeypatch, link, target, *, as_directory=False):
    """At the first readlink of ``link``: remove it (or make it a directory), read, re-point."""
    real = os.readlink
    done = []

    def readlink(path, *args, **kwargs):
        if done or os.fspath(path) != os.fspath(link):
            return real(path, *args, **kwargs)
        done.append(path)
        link.unlink()
        if as_directory:
            link.mkdir()
        try:
            return real(path, *args, **kwargs)
        finally:
            if as_directory:
                link.rmdir()
            link.symlink_to(target)

    monkeypatch.setattr(os, "readlink", readlink)
    return done


@pytest.mark.parametrize("as_directory", [False, True], ids=["vanished", "changed-type"])
def test_a_root_link_repointed_mid_resolution_is_read_where_it_settled(
    linked, monkeypatch, as_directory
):
    root = linked.metadata_root
    gen2 = root.parent / "gen2"
    hit = repoint_inside_readlink(monkeypatch, root, gen2, as_directory=as_directory)
    raws, complete = files.read_sources(root, linked.hints_path, linked.config_drive)
    assert hit  # the re-point did land inside a resolution
    assert complete
    assert any(r.data for r in raws)
    assert root.readlink() == gen2


@pytest.mark.parametrize("as_directory", [False, True], ids=["vanished", "changed-type"])
def test_the_poller_and_the_file_system_check_survive_a_repoint(linked, monkeypatch, as_directory):
    root = linked.metadata_root
    gen2 = root.parent / "gen2"
    repoint_inside_readlink(monkeypatch, root, gen2, as_directory=as_directory)
    assert fspoll.remote_filesystem(root) is None  # tmp_path is local; the point: no raise
    repoint_inside_readlink(monkeypatch, root, root.parent / "gen1", as_directory=as_directory)
    assert fspoll.snapshot(root)[0] == ("root", str(root.parent / "gen1"))


def test_a_root_missing_between_rm_and_ln_keeps_the_last_good_state(linked):
    kernel = example_kernel()
    r = Reconciler(linked, kernel, scan_devices=tuple)
    first = converge(r)
    assert first.status.converged
    described = r.belief.described()
    assert described
    root = linked.metadata_root
    root.unlink()  # rm: the pass runs now, between the two halves of the re-point
    gap = r.reconcile()
    assert r.belief.described() == described  # not read as "no devices"
    assert [c.type for c in gap.status.conditions] == ["MetadataUnavailable"]
    assert str(root) in gap.status.conditions[0].message
    assert [d.phase for d in gap.status.devices] == [d.phase for d in first.status.devices]
    root.symlink_to(root.parent / "gen2")  # ln -s
    after = r.reconcile()
    assert after.status.conditions == ()
    assert after.status.converged
    assert r.belief.described() == described


def test_a_root_that_never_was_there_is_no_gap_even_with_a_config_drive(tmp_path):
    cfg = example_config(tmp_path, gpu=False)
    shutil.rmtree(cfg.metadata_root)  # only the config drive: nothing was ever read from a root
    r = Reconciler(cfg, example_kernel(), scan_devices=tuple)
    r.reconcile()
    assert r.belief.entries  # the config drive
    again = r.reconcile()
    assert again.status.conditions == ()
