"""The XID failure taxonomy: NVIDIA's recommended actions per code, and which codes are failures
of the hardware. The one table of it in the portal (rules, ticket pages and the reliability report
read it from here).

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog" (Ampere and newer GPUs),
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html — its columns "Resolution
Bucket (Immediate Action)" and "Resolution Bucket (Investigatory Action)" are `immediate` and
`investigatory` below, by NVIDIA's own bucket names. The search tool's copy of that page showed
the table's header and first rows only (codes 1-13, e.g. 8: RESTART_APP / CONTACT_SUPPORT, 11:
RESTART_APP / CHECK_APP/CUDA, 13: RESTART_APP / WORKFLOW_XID_13); the other rows are written from
our knowledge of the catalog and NVIDIA's "Xid Errors" guide, so check a code against the page
before quoting it to a vendor. `category` is ours: how the portal counts the code.

Categories:
- hardware: a fault of the card itself (memory, bus, NVLink, engine); counts as a hardware
  failure in the reliability report and repeat-offender checks.
- firmware: GSP/firmware or driver faults (119, 120, ...); a reset or driver update usually
  clears them; not a hardware failure unless it keeps coming after one.
- application: caused by the job (bad kernel, illegal access, channel teardown); never a
  hardware failure.
- informational: logged for the record (e.g. a row remapping that succeeded).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext, gettext_noop

SOURCE_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
SOURCE_TITLE = 'NVIDIA, "Analyzing Xid Errors with the Xid Catalog"'

HARDWARE, FIRMWARE, APPLICATION = "hardware", "firmware", "application"
INFORMATIONAL, UNKNOWN = "informational", "unknown"

# What NVIDIA's resolution buckets ask for, in words for the ticket page.
BUCKETS = {
    "IGNORE": gettext_noop("No action needed."),
    "RESTART_APP": gettext_noop("Restart the application (the GPU itself is usable)."),
    "RESET_GPU": gettext_noop("Drain the GPU and reset it (nvidia-smi -r, or a reboot if the reset fails)."),
    "RESTART_BM": gettext_noop("Reboot the node (bare-metal restart)."),
    "RESTART_VM": gettext_noop("Restart the virtual machine."),
    "CHECK_APP/CUDA": gettext_noop("Check the application and its CUDA code for a bug."),
    "CHECK_MECHANICALS": gettext_noop("Check the card's seating, risers, power cables and cooling."),
    "UPDATE_SW": gettext_noop("Update the driver / firmware."),
    "CONTACT_SUPPORT": gettext_noop("Contact NVIDIA or the vendor's support (RMA if it recurs)."),
    "WORKFLOW_XID_13": gettext_noop(
        "Follow NVIDIA's Xid 13 workflow: run the job again; if different jobs fail the same way on "
        "this GPU only, run diagnostics (dcgmi diag) and treat it as hardware."
    ),
    "WORKFLOW_XID_31": gettext_noop(
        "Follow NVIDIA's Xid 31 workflow: look for an illegal memory access in the job "
        "(compute-sanitizer); if it recurs with correct code, run diagnostics."
    ),
    "WORKFLOW_XID_48": gettext_noop(
        "Follow NVIDIA's Xid 48 workflow: reset the GPU so the row remap takes effect, check the "
        "remapped-row counters; RMA if uncorrectable errors recur."
    ),
    "WORKFLOW_NVLINK_ERR": gettext_noop(
        "Follow NVIDIA's NVLink error workflow: check the link error counters (nvidia-smi nvlink "
        "-e), reseat bridges/cables; RMA if the link keeps failing."
    ),
    "WORKFLOW_XID_94": gettext_noop(
        "Follow NVIDIA's Xid 94 workflow: the error was contained to one application; restart it "
        "and reset the GPU at the next chance so the row remap takes effect."
    ),
    "WORKFLOW_XID_95": gettext_noop(
        "Follow NVIDIA's Xid 95 workflow: the error was not contained; reset the GPU before any "
        "further work; RMA if it recurs."
    ),
}


@dataclass(frozen=True)
class XidEntry:
    code: int
    mnemonic: str
    description: str
    category: str
    immediate: str
    investigatory: str

    @property
    def is_hardware_failure(self) -> bool:
        return self.category == HARDWARE

    def actions(self) -> list[tuple[str, str]]:
        """NVIDIA's two recommended actions: (bucket, what it means), in English (the RMA JSON's)."""
        return [
            (self.immediate, BUCKETS.get(self.immediate, "")),
            (self.investigatory, BUCKETS.get(self.investigatory, "")),
        ]

    def actions_shown(self) -> list[tuple[str, str]]:
        """The same in the active language (the bucket names are NVIDIA's and stay as they are)."""
        return [(bucket, gettext(words) if words else "") for bucket, words in self.actions()]

    @property
    def description_shown(self) -> str:
        return gettext(self.description) if self.description else ""


def _e(code, mnemonic, description, category, immediate, investigatory) -> XidEntry:
    """One row; `description` is marked for translation (the pages show it in the reader's language)."""
    return XidEntry(code, mnemonic, gettext_noop(description), category, immediate, investigatory)


CATALOG: dict[int, XidEntry] = {
    e.code: e
    for e in (
        _e(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", APPLICATION, "RESTART_APP",
           "CONTACT_SUPPORT"),
        _e(11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", APPLICATION,
           "RESTART_APP", "CHECK_APP/CUDA"),
        _e(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics engine exception", APPLICATION, "RESTART_APP",
           "WORKFLOW_XID_13"),
        _e(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault (MMU fault)", APPLICATION,
           "RESTART_APP", "WORKFLOW_XID_31"),
        _e(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream (PBDMA)", HARDWARE,
           "RESET_GPU", "CONTACT_SUPPORT"),
        _e(38, "ROBUST_CHANNEL_DRIVER_FIRMWARE_ERROR", "Driver firmware error", FIRMWARE, "RESET_GPU",
           "UPDATE_SW"),
        _e(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing (channel reset)", APPLICATION,
           "IGNORE", "CHECK_APP/CUDA"),
        _e(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors", APPLICATION,
           "IGNORE", "CHECK_APP/CUDA"),
        _e(48, "ROBUST_CHANNEL_DBE_ERROR", "Double bit ECC error (DBE)", HARDWARE, "RESET_GPU", "WORKFLOW_XID_48"),
        _e(54, "ROBUST_CHANNEL_DISPLAY_ERROR", "Auxiliary power is not connected", HARDWARE, "RESTART_BM",
           "CHECK_MECHANICALS"),
        _e(56, "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", "Display engine error", HARDWARE, "RESET_GPU",
           "CONTACT_SUPPORT"),
        _e(57, "ROBUST_CHANNEL_FB_ERROR", "Error programming video memory interface", HARDWARE, "RESET_GPU",
           "CONTACT_SUPPORT"),
        _e(61, "ROBUST_CHANNEL_PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning", FIRMWARE,
           "RESET_GPU", "UPDATE_SW"),
        _e(62, "ROBUST_CHANNEL_PMU_HALT", "Internal micro-controller halt", FIRMWARE, "RESET_GPU", "UPDATE_SW"),
        _e(63, "ROBUST_CHANNEL_ECC_PAGE_RETIREMENT_OR_ROW_REMAPPER", "ECC page retirement or row remapping "
           "recording event", HARDWARE, "RESET_GPU", "CONTACT_SUPPORT"),
        _e(64, "ROBUST_CHANNEL_ECC_PAGE_RETIREMENT_OR_ROW_REMAPPER_FAILURE", "ECC page retirement or row "
           "remapper recording failure", HARDWARE, "RESET_GPU", "CONTACT_SUPPORT"),
        _e(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "Video processor exception", APPLICATION, "RESTART_APP",
           "CHECK_APP/CUDA"),
        _e(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics engine class error", APPLICATION, "RESTART_APP",
           "CHECK_APP/CUDA"),
        _e(74, "NVLINK_ERROR", "NVLink error", HARDWARE, "RESET_GPU", "WORKFLOW_NVLINK_ERR"),
        _e(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", HARDWARE, "RESTART_BM",
           "CHECK_MECHANICALS"),
        _e(92, "ROBUST_CHANNEL_EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", HARDWARE, "IGNORE",
           "CONTACT_SUPPORT"),
        _e(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained ECC error", HARDWARE, "RESTART_APP", "WORKFLOW_XID_94"),
        _e(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained ECC error", HARDWARE, "RESET_GPU",
           "WORKFLOW_XID_95"),
        _e(119, "GSP_RPC_TIMEOUT", "Timeout waiting for RPC from GSP", FIRMWARE, "RESET_GPU", "UPDATE_SW"),
        _e(120, "GSP_ERROR", "GSP error", FIRMWARE, "RESET_GPU", "UPDATE_SW"),
        _e(121, "C2C_LINK_ERROR", "C2C link corrected error", HARDWARE, "IGNORE", "CONTACT_SUPPORT"),
        _e(140, "ECC_UNRECOVERABLE_ERROR", "Unrecovered ECC error", HARDWARE, "RESET_GPU", "CONTACT_SUPPORT"),
    )
}  # fmt: skip


def xid_entry(code: int) -> XidEntry:
    """The catalog's entry; an unknown code is taken as a possible hardware fault (conservative:
    the rule engine already treats unknown codes as hardware) with NVIDIA's default advice."""
    entry = CATALOG.get(code)
    if entry is not None:
        return entry
    return XidEntry(
        code, "", gettext_noop("Not in the portal's copy of the catalog"), UNKNOWN, "RESET_GPU", "CONTACT_SUPPORT"
    )


def ticket_xid_codes(ticket) -> list[int]:
    """The XID codes a ticket's evidence names (XID rules keep [ts, code] pairs)."""
    if not str(getattr(ticket, "rule", "")).startswith("xid_"):
        return []
    codes = set()
    for pair in (ticket.evidence or {}).get("readings", []) or []:
        try:
            codes.add(int(pair[1]))
        except (TypeError, ValueError, IndexError):
            continue
    return sorted(codes)


def ticket_xid_entries(ticket) -> list[XidEntry]:
    """NVIDIA's catalog entries for the codes of an XID ticket."""
    return [xid_entry(code) for code in ticket_xid_codes(ticket)]
