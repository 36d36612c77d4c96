"""The metadata contract in pydantic: a judge of the plain values of ``kvdev.schema``.

The host and the guest build, write and read with the plain values; these models state the
same documents in pydantic (over ``kvdev.host.k8s``' base model and types), and the agreement
tests hold the two to the same verdicts, document for document and error for error:
``metadata`` (DeviceMetadata as a conforming writer makes it), ``hints`` (GuestHints),
``reading`` (what upstream's reader decodes) and ``configdrive`` (KubeVirt's config drive).
"""
