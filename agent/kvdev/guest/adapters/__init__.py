"""The agent's adapters: the only code that touches the kernel, udev, the files and systemd.

Each third-party library is imported by one module here: pyudev by ``udev``, pyroute2 by
``netlink``, watchdog by ``watch``, psutil by ``procstats``, systemd by ``systemd``. They turn
the outside world into ``kvdev.guest.core.observed`` values and apply ``kvdev.guest.core.steps``;
``memory`` holds the in-memory stand-ins the core's tests use instead of the kernel.
"""
