"""What the scheduler asks of higher apps (docs/architecture.md, "Hooks").

- `window_holds` (policy, owned by portal.windows): the maintenance windows that keep a host's
  node drained now, `[(window id, title), …]`; a resume of any kind waits for them to end. Without
  an owner: none.
"""

from portal.core.policies import Policy

window_holds = Policy("scheduler.window_holds", default=lambda *, host_id: [])
