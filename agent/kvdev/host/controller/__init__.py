"""``kvdev-host controller``: keep each DRA-using VMI's guest bundle in a ConfigMap it owns.

Pure: ``render`` (one VMI's ConfigMap: keys, generations, the create/update/nothing decision;
the contract with the guest side is in its docstring), ``hints`` (GuestHints from the VMI
spec), ``index`` (the caches and which VMIs a change concerns), ``backoff`` (delays),
``events`` (which Event to write: de-duplication and the spam filter, as client-go's).
I/O: ``kube`` (the ``kubernetes`` client, raw JSON, errors mapped to kvdev's), ``reflector``
(list + watch with resourceVersion, bookmarks, re-list on 410 Gone, back-off), ``election``
(a coordination.k8s.io Lease), ``live`` (the running controller: reflectors -> index ->
queue -> render -> writes, 409 retried from a fresh read), ``recorder`` (Events on VMIs, one
thread), ``metrics`` (Prometheus, a registry of its own), ``endpoints`` (``/healthz``,
``/readyz``, ``/leader``, ``/metrics``). The tests' API server double is
``tests/apidouble.py``; the real API server judges the controller in ``tests/cluster``.
"""
