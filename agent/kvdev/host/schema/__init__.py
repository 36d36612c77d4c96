"""The host's pydantic models of the metadata contract (the guest reads with ``kvdev.schema``).

Modules, lowest first: ``base`` (the base model, its unknown-field rule, pydantic errors as
Problems), ``types`` (``kvdev.schema.fields``' rules as ``Annotated`` types), ``metadata``
(DeviceMetadata as the host's writer builds it), ``hints`` (GuestHints as the controller and
the bundle builder make it), ``reading`` and ``configdrive`` (what upstream's reader and
KubeVirt's config drive hold, the plain reader's judges in the tests).

These models share their limits and rule functions with ``kvdev.schema``; the tests hold the
plain reader and these models to agreement, document for document and error for error.
No I/O here.
"""
