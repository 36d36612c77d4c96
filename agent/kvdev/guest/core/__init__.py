"""The agent's pure core: what was observed, matched, planned and reported; no I/O.

Data in, data out: ``observed`` values from the adapters and documents from ``kvdev.schema`` go in;
bindings (``matching``), typed ``steps`` (``planning``) and a ``Status`` (``status``) come
out. ``sources`` keeps the last good content of each input file, ``check`` is
``kvdev metadata validate``'s report, ``inventory`` joins udev's and netlink's views of a device.
"""
