"""What checklists let higher apps react to (docs/architecture.md, "Hooks").

- `run_completed(run=...)`: a run was signed off; called after the sign-off commits, isolated (a
  subscriber's failure never undoes or refuses a sign-off) → portal.windows completes a window
  whose last run it was.
"""

from portal.core.hooks import Hook

run_completed = Hook("checklists.run_completed", isolated=True)
