"""Reading pytest's own summary line out of a build log (the deb build's in-chroot test run).

pytest ends a run with ``N passed, M deselected in 45.12s``, and, once a run takes a minute or
more, with the duration also as ``(0:02:02)``; counts come in pytest's order (``failed`` before
``passed``), and without ``-q`` the line is framed by ``=``. ``summaries`` reads every shape.
"""

import re

_SUMMARY = re.compile(
    r"^(?:=+ )?(?P<counts>\d+ \w+(?:, \d+ \w+)*) in [\d.]+s(?: \(\d+:\d\d:\d\d\))?(?: =+)?$",
    re.MULTILINE,
)


def summaries(log: str) -> list[dict[str, int]]:
    """Each pytest summary in ``log``, as outcome -> count (``{"passed": 684, ...}``)."""
    out = []
    for m in _SUMMARY.finditer(log):
        counts = {}
        for part in m["counts"].split(", "):
            number, outcome = part.split(" ", 1)
            counts[outcome] = int(number)
        out.append(counts)
    return out
