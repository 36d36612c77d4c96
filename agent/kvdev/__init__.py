"""kvdev: the devices Kubernetes DRA gave a KubeVirt VM, known and configured inside the guest.

This package only carries the version; everything else lives in the modules named in
docs/architecture.md.
"""

__version__ = "0.1.0"
