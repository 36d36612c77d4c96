"""rtnetlink, our own codec: read links, addresses and routes, apply typed steps, watch changes.

A small struct-based codec for exactly what the agent does (no third-party library): it
decodes only the attributes the agent reads and skips the rest by length. ``Netlink`` answers
``read_state`` from an event-fed cache (one full dump at the first read and after an overflow,
then the events) as the frozen values of ``observed`` (reporting everything it sees: the
planner decides what matters), and applies the ``steps`` it is given in order, all of one call
in one send, one ``StepResult`` each. It makes no decisions and never raises for a kernel error
while applying: each error becomes a readable, classified result (retryable or permanent) with
the kernel's extended-ack message. ``LinkEvents`` only says *that* something changed.

Modules, lowest first (each imports only those above it):

* ``rtnl``     kernel constants, the socket (in a network namespace when asked), one batch of
  requests sent and their replies read
* ``codec``    attributes by type, the requests as bytes, acknowledgements read
* ``reading``  messages decoded into ``observed`` values (and their cache keys)
* ``cache``    the event-fed cache of links, addresses and routes
* ``applying`` ``Netlink``: the state from the cache; steps turned into one batch of requests
* ``events``   ``LinkEvents``: the change-notification socket that wakes the loop
"""

from kvdev.guest.adapters.netlink._applying import Netlink
from kvdev.guest.adapters.netlink._events import LinkEvents

__all__ = ["LinkEvents", "Netlink"]
