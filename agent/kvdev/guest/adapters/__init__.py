"""The agent's adapters: the only code that touches the kernel, udev, the files and systemd.

Each third-party library is imported by one module here: pyudev by ``udev``, watchdog by
``watch``, psutil by ``procstats``, systemd by ``systemd``; rtnetlink is spoken by ``netlink``'s
own codec (no library). They turn
the outside world into ``kvdev.guest.core.observed`` values and apply ``kvdev.guest.core.steps``;
``memory`` holds the in-memory stand-ins the core's tests use instead of the kernel.
"""
