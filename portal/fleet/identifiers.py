"""What a host name and a GPU uuid may contain.

Both end up in URLs (`/hosts/<hostname>/`, `/gpus/<uuid>/`, the live WebSocket paths, the API) and
in the agents' batches, so they are kept to characters a URL path segment carries as is:

- a host name is one or more dot-separated labels of ASCII letters, digits, `-` and `_`
  (RFC 1123 names, plus the underscore some labs use), at most 253 characters (the field's length);
- a GPU uuid is NVML's: `GPU-` or `MIG-` followed by ASCII letters, digits and dashes, at most 96
  characters in all. NVML writes hex digits; other letters are accepted for simulators and test
  rigs. NVML's old MIG form (`MIG-GPU-<uuid>/<gi>/<ci>`, before driver R470) is refused.

The URLs are built safely whatever a stored value holds (see portal.core.converters); these rules
keep the values readable.
"""

import re

from django.core.validators import RegexValidator

HOSTNAME_PATTERN = r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}))*$"
GPU_UUID_PATTERN = r"^(?:GPU|MIG)-[A-Za-z0-9-]{1,92}$"

HOSTNAME_RE = re.compile(HOSTNAME_PATTERN)
GPU_UUID_RE = re.compile(GPU_UUID_PATTERN)

HOSTNAME_RULE = "letters, digits, '-' and '_' in dot-separated labels of at most 63 characters"
GPU_UUID_RULE = "'GPU-' or 'MIG-' followed by letters, digits and dashes (NVML's form)"

validate_hostname = RegexValidator(HOSTNAME_RE, f"Not a host name: {HOSTNAME_RULE}.", code="invalid_hostname")
validate_gpu_uuid = RegexValidator(GPU_UUID_RE, f"Not a GPU uuid: {GPU_UUID_RULE}.", code="invalid_gpu_uuid")
