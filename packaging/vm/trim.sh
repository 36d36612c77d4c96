#!/usr/bin/env bash
# mmdebstrap customize hook for the e2e guest: trim the boot to what the test needs.
#
# Owns: masking units and setting the few switches a fast, headless test boot wants.
# Must not install or remove packages (build-image.sh chooses them).
# Usage: trim.sh ROOT
set -euo pipefail
root=$1

mask() {
    for unit; do
        ln -sfn /dev/null "$root/etc/systemd/system/$unit"
    done
}
# No logins, no timers, no debug file systems: nothing of it is under test.
mask getty@tty1.service serial-getty@ttyS0.service getty.target console-getty.service \
    apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer \
    sys-kernel-debug.mount sys-kernel-tracing.mount sys-kernel-config.mount dev-hugepages.mount \
    dev-mqueue.mount sys-fs-fuse-connections.mount systemd-pstore.service \
    systemd-timesyncd.service systemd-update-utmp.service systemd-update-utmp-runlevel.service

# The network managers are installed but off: a boot that tests the agent beside one enables it
# (tests/e2e/test_vm_neighbours.py, through the run disk's extra files). cloud-init needs no
# switch: without a datasource (no config drive) ds-identify disables it for the boot.
rm -f "$root"/etc/systemd/system/multi-user.target.wants/NetworkManager.service \
    "$root"/etc/systemd/system/network-online.target.wants/NetworkManager-wait-online.service \
    "$root"/etc/systemd/system/dbus-org.freedesktop.nm-dispatcher.service \
    "$root"/etc/systemd/system/multi-user.target.wants/systemd-networkd.service \
    "$root"/etc/systemd/system/sockets.target.wants/systemd-networkd.socket \
    "$root"/etc/systemd/system/network-online.target.wants/systemd-networkd-wait-online.service

# The e2e runner starts at boot.
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -sfn /etc/systemd/system/kvdev-e2e.service \
    "$root/etc/systemd/system/multi-user.target.wants/kvdev-e2e.service"

echo kvdev-e2e >"$root/etc/hostname"
# No root password is needed: nobody logs in; the runner reports through the share.
# A fixed, non-empty machine id: an empty one makes systemd run its first-boot presets.
echo 4b7664657665326554657374566d3031 >"$root/etc/machine-id"
