"""GPU host agent: collects NVML telemetry and pushes it to the portal (protocol ingest-v1).

Depends on the standard library and nvidia-ml-py only, so it installs on a bare GPU server.
"""

__version__ = "0.1.0"
