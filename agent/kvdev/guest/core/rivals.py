"""Other network configuration that would fight kvdev over the NICs it configures.

* an **ifcfg-rh file** naming such a NIC (by ``DEVICE=`` or ``HWADDR=``): NetworkManager up to
  1.58 and the legacy network-scripts configure the NIC from it; NetworkManager 1.60 no longer
  reads ifcfg files at all. kvdev writes none;
* **cloud-init's network hotplug** (``updates: network: when: [hotplug]``): cloud-init renders
  and applies network configuration for every NIC that appears, a DRA NIC included, and undoes
  what kvdev set.

Each finding is a warning with what to do (docs/guides/network-managers.md); kvdev still
configures the NIC. Pure: values in, (name, why) out.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvdev.guest.core.primary import Configured

GUIDE = "see kvdev's network-managers guide"


def ifcfg_rivals(
    configured: Iterable[tuple[str, str | None]], named: Iterable[Configured]
) -> list[tuple[str, str]]:
    """(name, why) per NIC kvdev configures (``configured``: name, MAC) that an ifcfg file names."""
    files = list(named)
    out = []
    for ifname, mac in sorted(configured):
        for f in files:
            if (f.name is not None and f.name == ifname) or (f.mac is not None and f.mac == mac):
                why = (
                    f"{f.source} names {ifname}, which kvdev configures: NetworkManager before "
                    "1.60 and network-scripts would configure it too; remove the file or give "
                    f"it NM_CONTROLLED=no ({GUIDE})"
                )
                out.append((ifname, why))
                break
    return out


def hotplug_rival(source: str | None, configured: Iterable[str]) -> str | None:
    """Why cloud-init's network hotplug (on, per ``source``) fights kvdev; None when it does not."""
    names = sorted(configured)
    if source is None or not names:
        return None
    return (
        f"cloud-init's network hotplug is on ({source}): it configures every NIC that appears, "
        f"those kvdev configures too ({', '.join(names)}); turn it off, or leave kvdev's NICs "
        f"out of cloud-init's network config ({GUIDE})"
    )


def findings(
    configured: Iterable[tuple[str, str | None]],
    named: Iterable[Configured],
    hotplug: str | None,
) -> list[tuple[str, str]]:
    """(condition type, why) for the links kvdev configures (name, MAC): what fights it there."""
    links = list(configured)
    out = [("IfcfgNamesManagedNic", why) for _, why in ifcfg_rivals(links, named)]
    if (why := hotplug_rival(hotplug, [name for name, _ in links])) is not None:
        out.append(("CloudInitHotplug", why))
    return out
