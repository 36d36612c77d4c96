"""Small builders of valid documents as plain JSON data, for tests to mutate."""

import copy
import json

V1BETA1 = "metadata.resource.k8s.io/v1beta1"
V1ALPHA1 = "metadata.resource.k8s.io/v1alpha1"
V1 = "metadata.resource.k8s.io/v1"
V2 = "metadata.resource.k8s.io/v2"
HINTS_V1ALPHA1 = "guest.kvdev.io/v1alpha1"
DEV0 = "requests[0].devices[0]"


def device(i=0, **extra):
    return {"driver": "sriov.example.com", "pool": "node-a", "name": f"vf-{i}", **extra}


def metadata_doc(n_devices=1, api=V1BETA1):
    """A valid DeviceMetadata of claim vm1-nics, request nic, with ``n_devices`` devices."""
    return {
        "apiVersion": api,
        "kind": "DeviceMetadata",
        "metadata": {"name": "vm1-nics", "namespace": "vms", "uid": "uid-1", "generation": 1},
        "requests": [{"name": "nic", "devices": [device(i) for i in range(n_devices)]}],
    }


def with_device(i=0, n_devices=1, **extra):
    """metadata_doc(n_devices) with ``extra`` keys set on device ``i``."""
    doc = metadata_doc(n_devices)
    doc["requests"][0]["devices"][i].update(extra)
    return doc


def with_attrs(attrs):
    return with_device(attributes=attrs)


def alpha(doc):
    """The same document as v1alpha1."""
    return {**copy.deepcopy(doc), "apiVersion": V1ALPHA1}


def stream(*objects):
    """A JSON stream: one compact object per line, UTF-8."""
    return "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objects).encode()


def both(doc):
    """The stream a writer emits: v1beta1 then v1alpha1."""
    return stream(doc, alpha(doc))


def hint(**extra):
    return {"claim": {"resourceClaimName": "vm1-nics"}, "request": "nic", **extra}


def hints_doc(*devices):
    return {
        "apiVersion": HINTS_V1ALPHA1,
        "kind": "GuestHints",
        "metadata": {"generation": 1},
        "devices": list(devices) or [hint()],
    }
