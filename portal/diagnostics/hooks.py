"""What diagnostics hands on to the apps above it (`portal.core.hooks.Hook`), subscribed in their
`AppConfig.ready()`:

- `diagnostic_finished`: a diagnostic finished or expired, called with `diagnostic=` once the
  transaction that stored the outcome commits (the scheduler's resume gate: a pass may resume a
  node). Isolated: the outcome is stored whatever a subscriber does.
- `burn_in_requested`: a burn-in diagnostic was requested for new GPUs, called with `diagnostic=`
  once it is stored (the scheduler keeps the host's node drained until it passes). Isolated.
"""

from portal.core.hooks import Hook

diagnostic_finished = Hook("diagnostics.diagnostic_finished", isolated=True)
burn_in_requested = Hook("diagnostics.burn_in_requested", isolated=True)
