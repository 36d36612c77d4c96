"""rtnetlink: read links, addresses and routes, apply typed steps, and watch for changes.

The only package that imports pyroute2. ``Netlink`` turns kernel dumps into the frozen values of
``observed`` (reporting everything it sees: the planner decides what matters) and applies the
``steps`` it is given, exactly and in order, one ``StepResult`` each. It makes no decisions and
never raises for a kernel error while applying: each error becomes a readable, classified
result (retryable or permanent). ``LinkEvents`` only says *that* something changed; callers
re-observe.

pyroute2's synchronous ``IPRoute`` runs a private asyncio loop: use these classes from the
thread that created them, and never from inside a running event loop.

Modules, lowest first (each imports only those above it):

* ``rtnl``     the socket and protocol plumbing: kernel constants, what pyroute2 is asked for,
  opening and closing a socket
* ``reading``  kernel dumps parsed into ``observed`` values; interrupted dumps detected
* ``applying`` ``Netlink``: reads the state, turns steps into requests and applies them
* ``events``   ``LinkEvents``: the change-notification socket
"""

from kvdev.guest.adapters.netlink._applying import Netlink
from kvdev.guest.adapters.netlink._events import LinkEvents

__all__ = ["LinkEvents", "Netlink"]
