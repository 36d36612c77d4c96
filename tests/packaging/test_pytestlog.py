"""tests/pytestlog.py reads pytest's summary in each shape pytest writes it (issue 23 §6: a
build whose in-chroot run took over a minute ended with ``(0:02:02)``, which the deb test's
regex could not read, so ``make deb`` failed on any slower machine)."""

import pytest

from pytestlog import summaries


@pytest.mark.parametrize(
    ("line", "counts"),
    [
        ("684 passed, 3 deselected in 45.12s", {"passed": 684, "deselected": 3}),
        ("684 passed, 3 deselected in 122.34s (0:02:02)", {"passed": 684, "deselected": 3}),
        ("684 passed in 3601.00s (1:00:01)", {"passed": 684}),
        ("2 failed, 682 passed in 61.20s (0:01:01)", {"failed": 2, "passed": 682}),
        ("1 passed, 1 error in 0.50s", {"passed": 1, "error": 1}),
        (
            "======= 684 passed, 1 warning in 70.01s (0:01:10) =======",
            {"passed": 684, "warning": 1},
        ),
    ],
)
def test_every_shape_of_the_summary_is_read(line, counts):
    log = f"debian/rules override_dh_auto_test\n....... [100%]\n{line}\nmake[1]: Leaving\n"
    assert summaries(log) == [counts]


def test_lines_that_only_look_like_one_are_not_summaries():
    assert summaries("copied 3 files in 2.0s by hand\nin 1.2s\n684 passed\n") == []
