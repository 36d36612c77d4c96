"""Interface names: the one rule every name kvdev gives, or is asked to give, a link must pass.

Pure and stdlib only (no pydantic): ``kvdev.schema.fields`` re-exports it for the documents'
models, and the root helper ``kvdev-udev-marks`` (``kvdev.guest.udevmarks``) checks every name
the agent's link wishes ask for with it, at the start-up cost of this module alone.
"""

from __future__ import annotations

IFNAMSIZ = 16  # the kernel's buffer, including the terminating NUL: names have <= 15 bytes
_IFNAME_FORBIDDEN = set("/:%=") | set(" \t\n\v\f\r")
_IFNAME_RESERVED = frozenset({".", "..", "all", "default"})


def check_ifname(value: str) -> str:
    """A name that the kernel, udev and a systemd ``.link`` file all accept for an interface.

    The kernel's ``dev_valid_name`` (at most 15 bytes, not ``.``/``..``, no ``/``, ``:`` or
    white space) and systemd's ``ifname_valid`` on top, which a ``.link`` file's ``Name=`` must
    pass at the next boot: printable ASCII only, not ``all`` or ``default`` (the kernel's
    ``/proc/sys/net/*/conf/{all,default}`` directories: the kernel itself refuses a rename to
    them) and not all digits (an ifindex). ``%`` is refused too: the kernel would treat the
    name as a template (``net%d``). ``=`` is refused as well: the kernel and udev would take
    it, but names travel in ``KEY=VALUE`` text (udev properties, ``.link`` files, a helper's
    ``NAME=WANT`` list once ran ``nmcli device set data=1 ...``), where it splits a name in two.
    """
    if not value:
        raise ValueError("interface name must not be empty")
    if len(value.encode()) >= IFNAMSIZ:
        raise ValueError(
            f"interface name {value!r} is {len(value.encode())} bytes; the kernel allows "
            f"at most {IFNAMSIZ - 1}"
        )
    if value in _IFNAME_RESERVED:
        raise ValueError(f"interface name {value!r} is reserved")
    bad = sorted(set(value) & _IFNAME_FORBIDDEN)
    if bad:
        raise ValueError(f"interface name {value!r} contains forbidden characters {bad!r}")
    if not value.isprintable():
        raise ValueError(f"interface name {value!r} contains control characters")
    if not value.isascii():
        raise ValueError(
            f"interface name {value!r} is not ASCII; udev refuses such a name in a .link file"
        )
    if value.isdigit():
        raise ValueError(f"interface name {value!r} is all digits, like an ifindex")
    return value
