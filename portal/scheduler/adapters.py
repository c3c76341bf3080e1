"""One small interface to the cluster's scheduler, with a Slurm implementation in two modes.

- `cli`: the portal's machine is a Slurm client. `sinfo --json` / `squeue --json` where the
  version has them (21.08 and later), `scontrol -o` and `squeue -o` formats otherwise;
  `scontrol update` for drain and resume. Commands are argument lists, never shell strings: a drain
  reason holds a ticket title, partly an agent's text.
- `rest`: slurmrestd with a JWT (`X-SLURM-USER-NAME`, `X-SLURM-USER-TOKEN`). Slurm 22.05 serves
  OpenAPI v0.0.38, which reads nodes and jobs but has no node update: drain and resume need
  v0.0.39 (23.02) or later (`POST /slurm/v0.0.XX/node/{name}`, `state` a list of flags). Newer
  versions also turn `state`/`job_state` into lists and times into `{"set", "number"}` objects;
  the parsers below read both shapes. The token goes only to an `https://` URL (or one on this
  machine's loopback) and never across a redirect: a 3xx answer is an error, not followed.

Every failure to talk to Slurm is a `SchedulerUnavailable` (retry later) or `NodeUnknown`; of
those, `SchedulerSilent` when Slurm did not answer at all, and (rest) `SchedulerRefused` when
slurmrestd answered a request with an error.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import json
import logging
import os
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from typing import Protocol

from portal.core.errors import ApplicationError, NotFound

log = logging.getLogger(__name__)

REASON_PREFIX = "gpu-fleet #"
BURN_IN_PREFIX = "gpu-fleet burn-in: "
WINDOW_PREFIX = "gpu-fleet window #"  # a planned maintenance window's drain (portal.windows)
RESERVATION_PREFIX = "gpu-fleet-window-"
RESERVATION_FLAGS = ("MAINT", "IGNORE_JOBS")
RESERVATION_USERS = ("root",)  # Slurm wants users or accounts on a reservation; a maint one is root's
REASON_MAX = 200  # Slurm keeps longer reasons, but sinfo's and the page's columns don't
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


class SchedulerUnavailable(ApplicationError):
    """Slurm could not be reached or refused the request; the action is retried (HTTP 503)."""


class SchedulerSilent(SchedulerUnavailable):
    """Slurm did not answer at all (its command missing, or no answer within the timeout), as
    opposed to answering with an error."""


class SchedulerRefused(SchedulerUnavailable):
    """slurmrestd answered, with an error about what was asked (`status`: the HTTP status), as
    opposed to not answering (SchedulerSilent) or the portal's setup being wrong."""

    def __init__(self, message: str, *, status: int):
        super().__init__(message)
        self.status = status


class NodeUnknown(NotFound):
    """Slurm does not know the node (HTTP 404)."""


@dataclasses.dataclass(frozen=True)
class Job:
    id: int
    user: str
    name: str
    gpus: list[int]  # the GPU indices the job holds on this node ([] when Slurm does not say)
    start: dt.datetime | None
    end: dt.datetime | None = None  # start plus the time limit (None: no limit, or Slurm does not say)


@dataclasses.dataclass(frozen=True)
class Reservation:
    name: str
    nodes: list[str]
    start: dt.datetime | None
    end: dt.datetime | None
    flags: list[str]  # upper case, as Slurm says them: MAINT, IGNORE_JOBS, …


@dataclasses.dataclass(frozen=True)
class JobInfo:
    """What Slurm says of one job, running or finished (the jobs app's user, name, account)."""

    user: str
    name: str
    account: str


@dataclasses.dataclass(frozen=True)
class Node:
    node: str
    state: str  # Slurm's words in lower case, flags joined with "+": "idle", "drained", "mixed+drain"…
    reason: str


class SchedulerAdapter(Protocol):
    timeout: float  # seconds one command or request may take

    def node(self, name: str) -> Node: ...
    def jobs(self, name: str) -> list[Job]: ...
    def drain(self, name: str, reason: str) -> None: ...
    def resume(self, name: str) -> None: ...
    def reservation(self, name: str) -> Reservation | None: ...
    def reservation_create(self, name: str, *, nodes: list[str], start: dt.datetime, end: dt.datetime) -> None: ...
    def reservation_delete(self, name: str) -> None: ...
    def job_info(self, job_id: int) -> JobInfo | None: ...


def clean_reason(reason: str, *, limit: int = REASON_MAX) -> str:
    """One line, no control characters, at most `limit` characters."""
    # scontrol drops double quotes from a value; single ones keep the text as it was typed.
    text = _CONTROL.sub(" ", reason or "").replace('"', "'").strip()
    text = re.sub(r" {2,}", " ", text)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def is_portal_reason(reason: str) -> bool:
    """A drain reason the portal set itself (a ticket's, a rest's, a burn-in's, a maintenance
    window's), never a person's."""
    return reason.startswith((REASON_PREFIX, BURN_IN_PREFIX, WINDOW_PREFIX))


def node_state_words(base: str | list, flags: list | None = None) -> str:
    """Slurm's node state as sinfo says it: DRAIN on an idle node is "drained", on a busy one
    "draining"; other flags follow with "+"."""
    words = [str(w).lower() for w in ([base] if isinstance(base, str) else list(base)) + list(flags or []) if w]
    if not words:
        return "unknown"
    head, rest = words[0], words[1:]
    if "drain" in rest and head in ("idle", "allocated", "mixed", "completing"):
        rest.remove("drain")
        head = "drained" if head == "idle" else "draining"
    seen = []
    for word in rest:
        if word not in seen and word != head:
            seen.append(word)
    return "+".join([head, *seen])


def _time(value) -> dt.datetime | None:
    if isinstance(value, dict):  # 23.02+: {"set": true, "infinite": false, "number": 1700000000}
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if not value:
        return None
    return dt.datetime.fromtimestamp(int(value), tz=dt.UTC)


def expand_hostlist(expr: str) -> list[str]:
    """`gpu[01-03,07],login1` → gpu01 gpu02 gpu03 gpu07 login1 (Slurm's one-level brackets)."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expr or ""):
        match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not match:
            names.append(part)
            continue
        prefix, ranges, suffix = match.groups()
        for piece in ranges.split(","):
            low, _, high = piece.partition("-")
            if high and low.isdigit() and high.isdigit():
                names += [f"{prefix}{n:0{len(low)}d}{suffix}" for n in range(int(low), int(high) + 1)]
            else:
                names.append(f"{prefix}{piece}{suffix}")
    return names


def gpu_indices(detail: str) -> list[int]:
    """`gpu:2(IDX:0,3)` or `gpu:a100:2(IDX:0-1)` → the indices."""
    match = re.search(r"IDX:([0-9,\-]+)", detail or "")
    if not match:
        return []
    indices: list[int] = []
    for piece in match.group(1).split(","):
        low, _, high = piece.partition("-")
        if low.isdigit():
            indices += list(range(int(low), int(high) + 1)) if high.isdigit() else [int(low)]
    return indices


def _running(job: dict) -> bool:
    state = job.get("job_state")
    states = state if isinstance(state, list) else [state]
    return "RUNNING" in [str(s).upper() for s in states]


def jobs_from_json(jobs: list[dict], node: str) -> list[Job]:
    """Running jobs on `node` from squeue --json / slurmrestd's jobs (22.05 and later shapes)."""
    found = []
    for job in jobs:
        if not _running(job):
            continue
        nodes = expand_hostlist(job.get("nodes") or "")
        if node not in nodes:
            continue
        details = job.get("gres_detail") or []
        position = nodes.index(node)
        found.append(
            Job(
                id=int(job["job_id"]),
                user=str(job.get("user_name") or job.get("user_id") or ""),
                name=str(job.get("name") or ""),
                gpus=gpu_indices(details[position]) if position < len(details) else [],
                start=_time(job.get("start_time")),
                end=_job_end(job),
            )
        )
    return sorted(found, key=lambda j: j.id)


_INFINITE = (0xFFFFFFFF, 0xFFFFFFFE)  # INFINITE and NO_VAL (32-bit), as 22.05's JSON writes them


def _job_end(job: dict) -> dt.datetime | None:
    """Start plus time limit (minutes): None for a job without a limit."""
    start, limit = _time(job.get("start_time")), job.get("time_limit")
    if isinstance(limit, dict):  # 23.02+: {"set", "infinite", "number"}
        limit = None if not limit.get("set", True) or limit.get("infinite") else limit.get("number")
    if start is None or limit in (None, "") or int(limit) in _INFINITE:
        return None
    if dt.timedelta(minutes=int(limit)) >= UNLIMITED_END:
        return None  # Slurm's "no limit" written as a year, as squeue's %e writes it
    return start + dt.timedelta(minutes=int(limit))


def reservation_from_json(entries: list[dict], name: str) -> Reservation | None:
    for entry in entries:
        if entry.get("name") == name:
            flags = entry.get("flags") or []
            flags = flags.split(",") if isinstance(flags, str) else flags
            return Reservation(
                name=name, nodes=expand_hostlist(str(entry.get("node_list") or "")),
                start=_time(entry.get("start_time")), end=_time(entry.get("end_time")),
                flags=[str(f).upper() for f in flags if f],
            )  # fmt: skip
    return None


def reservation_from_line(line: str, name: str) -> Reservation | None:
    """`scontrol -o show reservation NAME`: one line of Key=Value pairs."""
    fields = dict(re.findall(r"(\w+)=(\S*)", line or ""))
    if fields.get("ReservationName") != name:
        return None

    def when(text: str) -> dt.datetime | None:
        try:
            return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
        except ValueError:
            return None

    flags = [f for f in (fields.get("Flags") or "").upper().split(",") if f]
    return Reservation(
        name=name, nodes=expand_hostlist(fields.get("Nodes") or ""), start=when(fields.get("StartTime") or ""),
        end=when(fields.get("EndTime") or ""), flags=flags,
    )  # fmt: skip


def _slurm_time(moment: dt.datetime) -> str:
    """A time as scontrol reads it, in UTC (the portal runs scontrol with TZ=UTC)."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def node_from_json(nodes: list[dict], name: str) -> Node:
    for entry in nodes:
        if entry.get("name") == name or entry.get("hostname") == name and not entry.get("name"):
            return Node(
                node=name,
                state=node_state_words(entry.get("state") or "", entry.get("state_flags")),
                reason=str(entry.get("reason") or ""),
            )
    raise NodeUnknown(f"Slurm has no node {name!r}", problems=[("hostname", f"Slurm has no node {name!r}")])


def _version(text: str) -> tuple[int, int]:
    match = re.search(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


class SlurmCli:
    """Slurm through its commands on this machine (`SLURM_BIN_DIR` or `PATH`)."""

    def __init__(self, *, bin_dir: str = "", timeout: float = 10.0):
        self.bin_dir = bin_dir
        self.timeout = timeout
        self._json: bool | None = None

    def _run(self, command: str, *args: str) -> str:
        program = os.path.join(self.bin_dir, command) if self.bin_dir else command
        # Times given to and read from scontrol are UTC, whatever this machine's zone.
        env = {**os.environ, "TZ": "UTC"}
        try:
            done = subprocess.run(  # noqa: S603 - an argument list, never a shell
                [program, *args], capture_output=True, text=True, timeout=self.timeout, check=False, env=env
            )
        except FileNotFoundError as error:
            raise SchedulerSilent(f"{command} not found: {error}") from error
        except subprocess.TimeoutExpired as error:
            raise SchedulerSilent(f"{command} did not answer within {self.timeout:g} s") from error
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().splitlines()
            raise SchedulerUnavailable(f"{command} failed: {message[-1] if message else done.returncode}"[:500])
        return done.stdout

    def uses_json(self) -> bool:
        if self._json is None:
            self._json = _version(self._run("sinfo", "-V")) >= (21, 8)
        return self._json

    def node(self, name: str) -> Node:
        if self.uses_json():
            data = json.loads(self._run("sinfo", "--json", "-N", "-n", name))
            return node_from_json(data.get("nodes") or [], name)
        try:
            line = self._run("scontrol", "-o", "show", "node", name)
        except SchedulerUnavailable as error:
            if "not found" in str(error):
                raise NodeUnknown(f"Slurm has no node {name!r}") from error
            raise
        state = re.search(r"(?:^| )State=(\S+)", line)
        reason = re.search(r" Reason=(.*?)(?: \[[^\]]*@[^\]]*\])?\s*$", line)
        words = (state.group(1) if state else "unknown").split("+")
        return Node(node=name, state=node_state_words(words[0], words[1:]), reason=reason.group(1) if reason else "")

    def jobs(self, name: str) -> list[Job]:
        if self.uses_json():
            data = json.loads(self._run("squeue", "--json", "-w", name, "-t", "RUNNING"))
            return jobs_from_json(data.get("jobs") or [], name)
        out = self._run("squeue", "-h", "-w", name, "-t", "RUNNING", "-o", "%i|%u|%S|%e|%j")
        jobs = []
        for line in out.splitlines():
            job_id, user, start, end, job_name = (line.split("|", 4) + ["", "", "", ""])[:5]
            started, ends = (_utc(text) for text in (start, end))
            if started is not None and ends is not None and ends - started >= UNLIMITED_END:
                ends = None  # no time limit: Slurm writes the start plus a year as its end
            jobs.append(Job(id=int(job_id), user=user, name=job_name, gpus=[], start=started, end=ends))
        return jobs

    def job_info(self, job_id: int) -> JobInfo | None:
        """`scontrol show job` while Slurm holds it, else `sacct` (accounting); None when neither
        knows the job. sacct answering with an error (accounting off, as on a single-node cluster)
        is "not known" too: were it "Slurm down", a job gone from slurmctld would be asked forever
        and the jobs queued behind it never. Only silence (command missing, timeout) raises."""
        try:
            line = self._run("scontrol", "-o", "show", "job", str(int(job_id)))
        except SchedulerUnavailable as error:
            if "Invalid job id" not in str(error):
                raise
        else:
            user = re.search(r"(?:^| )UserId=([^( ]*)", line)
            name = re.search(r"(?:^| )JobName=(.*?) UserId=", line)
            account = re.search(r"(?:^| )Account=(\S*)", line)
            if user:
                account_name = account.group(1) if account and account.group(1) != "(null)" else ""
                return JobInfo(user=user.group(1), name=name.group(1) if name else "", account=account_name)
        try:
            out = self._run("sacct", "-n", "-P", "-X", "-j", str(int(job_id)), "-o", "User,Account,JobName")
        except SchedulerSilent:
            raise
        except SchedulerUnavailable:
            return None
        for row in out.splitlines():
            user, account, name = (row.split("|", 2) + ["", ""])[:3]
            if user:
                return JobInfo(user=user, name=name, account=account)
        return None

    def _update(self, name: str, *args: str) -> None:
        try:
            self._run("scontrol", "update", f"NodeName={name}", *args)
        except SchedulerUnavailable as error:
            if "Invalid node name" in str(error):
                raise NodeUnknown(f"Slurm has no node {name!r}") from error
            raise

    def drain(self, name: str, reason: str) -> None:
        # "Reason=<text>" is one argv element: spaces, quotes and semicolons stay data.
        self._update(name, "State=DRAIN", f"Reason={clean_reason(reason)}")

    def resume(self, name: str) -> None:
        self._update(name, "State=RESUME")

    def reservation(self, name: str) -> Reservation | None:
        try:
            line = self._run("scontrol", "-o", "show", "reservation", name)
        except SchedulerUnavailable as error:
            if "not found" in str(error) or "Invalid reservation" in str(error):
                return None
            raise
        return reservation_from_line(line, name)

    def reservation_create(self, name: str, *, nodes: list[str], start: dt.datetime, end: dt.datetime) -> None:
        """`flags=maint,ignore_jobs`: no job that would run into it starts on its nodes, and the
        jobs running there now do not keep it from being made. Made already (an earlier attempt
        whose answer was lost): done."""
        try:
            self._run(
                "scontrol", "create", "reservation", f"ReservationName={name}", f"StartTime={_slurm_time(start)}",
                f"EndTime={_slurm_time(end)}", f"Nodes={','.join(nodes)}", f"Users={','.join(RESERVATION_USERS)}",
                f"Flags={','.join(RESERVATION_FLAGS)}",
            )  # fmt: skip
        except SchedulerUnavailable:
            if self.reservation(name) is not None:
                return
            raise

    def reservation_delete(self, name: str) -> None:
        """Gone already: done."""
        try:
            self._run("scontrol", "delete", f"ReservationName={name}")
        except SchedulerUnavailable:
            if self.reservation(name) is None:
                return
            raise


# squeue's %e for a job without a time limit (TimeLimit=UNLIMITED): its start plus 365 days. A
# pending job's start is an estimate squeue takes a moment apart from its end, so the two can
# differ by a second less than the year: a day's margin (no lab sets a limit of 364 days).
UNLIMITED_END = dt.timedelta(days=364)


def _utc(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
    except ValueError:  # "N/A", "Unknown", "NONE"
        return None


def rest_url_problem(url: str) -> str:
    """Why the JWT may not be sent to `url` ("" when it may): only over https, or in clear to
    this machine's loopback (a slurmrestd beside the portal, or a tunnel's local end)."""
    try:
        parts = urllib.parse.urlsplit(url or "")
        host = parts.hostname or ""
        parts.port  # noqa: B018 - a port that is not a number raises ValueError
    except ValueError as error:
        return f"SLURM_REST_URL is not a URL ({error})"
    if parts.scheme not in ("http", "https") or not host:
        return "SLURM_REST_URL must be an https:// URL (http:// only to this machine's loopback)"
    if parts.username is not None or parts.password is not None:
        return "SLURM_REST_URL must not hold a user or password (the JWT is the credential)"
    if parts.scheme == "https" or _loopback(host):
        return ""
    return (
        f"SLURM_REST_URL must be https:// (or http:// to 127.0.0.1, ::1 or localhost): "
        f"http://{host} would send the JWT in clear"
    )


def _loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is answered as the error it is: following it would send X-SLURM-USER-TOKEN to
    wherever the answer points (urllib keeps a request's headers across a redirect)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError with the 3xx


def _opener(url: str) -> urllib.request.OpenerDirector:
    """No redirects ever; the environment's proxy (`https_proxy`) only for https: a plain-http
    request goes to loopback, and through an `http_proxy` the token would cross the network in clear."""
    if url.lower().startswith("https://"):
        return urllib.request.build_opener(_NoRedirects)
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects)


# What slurmrestd answers for a reservation it does not have (22.05: a 500 saying so).
_NO_RESERVATION = (
    "Unable to query reservation",
    "Requested reservation is invalid",
    "Invalid reservation",
    "not found",
)

# OpenAPI plugins a slurmrestd may serve, newest first; the first it lists is used.
REST_VERSIONS = ("v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38")


class SlurmRest:
    """Slurm through slurmrestd with a JWT."""

    def __init__(self, *, url: str, user: str, token: str, timeout: float = 10.0):
        self.url = url.rstrip("/")
        self.user = user
        self.token = token
        self.timeout = timeout
        self._api: str | None = None

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        problem = rest_url_problem(self.url)
        if problem:  # the start-up check says so too (scheduler.E003); a worker never sends it either
            raise SchedulerUnavailable(problem)
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token, "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers, method=method)  # noqa: S310
        try:
            with _opener(self.url).open(request, timeout=self.timeout) as answer:
                text = answer.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            if 300 <= error.code < 400:
                where = error.headers.get("Location", "nowhere said")
                raise SchedulerUnavailable(
                    f"slurmrestd answered {error.code} (a redirect to {where[:200]}); the portal does not follow "
                    "redirects with its token: set SLURM_REST_URL to where slurmrestd answers"
                ) from error
            text = error.read().decode("utf-8", "replace")
            try:
                payload = json.loads(text)
            except ValueError:
                payload = None
            if not isinstance(payload, dict):
                raise _answered(error.code, text.strip()[:200], silent=False) from error
            if error.code == 404 or _errors_say(
                payload, "Invalid node name", "Unable to query node", *_NO_RESERVATION
            ):  # fmt: skip
                return payload
            silent = error.code >= 500 and _errors_say(payload, *_NOT_ANSWERING)
            raise _answered(error.code, _error_text(payload), silent=silent) from error
        except (OSError, TimeoutError) as error:
            raise SchedulerSilent(f"slurmrestd could not be reached: {error}") from error
        try:
            payload = json.loads(text)
        except ValueError as error:
            raise SchedulerRefused(f"slurmrestd answered something else than JSON: {text[:200]}", status=200) from error
        if not isinstance(payload, dict):
            raise SchedulerRefused(f"slurmrestd answered something else than an object: {text[:200]}", status=200)
        return payload

    def api(self) -> str:
        if self._api is None:
            spec = self._request("GET", "/openapi/v3")
            paths = " ".join(spec.get("paths", {}))
            self._api = next((v for v in REST_VERSIONS if f"/slurm/{v}/" in paths), "")
            if not self._api:
                raise SchedulerUnavailable("slurmrestd serves no Slurm OpenAPI version this portal knows")
        return self._api

    def node(self, name: str) -> Node:
        payload = self._request("GET", f"/slurm/{self.api()}/node/{_quote(name)}")
        return node_from_json(payload.get("nodes") or [], name)

    def jobs(self, name: str) -> list[Job]:
        payload = self._request("GET", f"/slurm/{self.api()}/jobs")
        _raise_errors(payload)
        return jobs_from_json(payload.get("jobs") or [], name)

    def job_info(self, job_id: int) -> JobInfo | None:
        """slurmrestd's job while Slurm holds it, else slurmdbd's (accounting); None when neither
        knows the job, as the cli adapter: an error answer about the job (404, "Invalid job id",
        any other 4xx or 5xx, accounting off) is "not known here", so that beat counts a try and
        no job holds up the ones behind it for ever. Raised: Slurm not answering (SchedulerSilent:
        no connection or timeout, 502/503/504, slurmctld or slurmdbd unreachable behind
        slurmrestd), and what is wrong with the portal's setup rather than the job (the token
        refused: 401, 403, 511; a redirect; no known API), which would otherwise give up every job."""
        api = self.api()  # its failures are slurmrestd's or the setup's, never this job's
        for path in (f"/slurm/{api}/job/{int(job_id)}", f"/slurmdb/{api}/job/{int(job_id)}"):
            try:
                payload = self._request("GET", path)
            except SchedulerRefused as error:
                if error.status in _SETUP_REFUSED:
                    raise
                log.info("slurmrestd: job %s not known at %s (%s)", job_id, path, error)
                continue
            if _errors_say(payload, *_NOT_ANSWERING):  # an answer that carries silence (200 or 404)
                raise SchedulerSilent(f"slurmrestd: {_error_text(payload)}")
            for job in payload.get("jobs") or []:
                user = job.get("user_name") or job.get("user")
                if user:
                    return JobInfo(
                        user=str(user), name=str(job.get("name") or ""), account=str(job.get("account") or "")
                    )
        return None

    def _update(self, name: str, body: dict) -> None:
        api = self.api()
        if api == "v0.0.38":
            raise SchedulerUnavailable(
                "slurmrestd v0.0.38 (Slurm 22.05) cannot update nodes; use SLURM_MODE=cli or Slurm 23.02 or later"
            )
        self.node(name)  # NodeUnknown before any change
        payload = self._request("POST", f"/slurm/{api}/node/{_quote(name)}", body)
        _raise_errors(payload)

    def drain(self, name: str, reason: str) -> None:
        self._update(name, {"state": ["DRAIN"], "reason": clean_reason(reason)})

    def resume(self, name: str) -> None:
        self._update(name, {"state": ["RESUME"]})

    def reservation(self, name: str) -> Reservation | None:
        payload = self._request("GET", f"/slurm/{self.api()}/reservation/{_quote(name)}")
        if _errors_say(payload, *_NO_RESERVATION):
            return None
        _raise_errors(payload)
        return reservation_from_json(payload.get("reservations") or [], name)

    def reservation_create(self, name: str, *, nodes: list[str], start: dt.datetime, end: dt.datetime) -> None:
        """`POST /slurm/v0.0.43/reservation` (Slurm 25.05): older slurmrestd versions read
        reservations but cannot make them."""
        api = self.api()
        if REST_VERSIONS.index(api) > 0:
            raise SchedulerUnavailable(
                f"slurmrestd {api} cannot create reservations (v0.0.43, Slurm 25.05, can); use SLURM_MODE=cli"
            )
        if self.reservation(name) is not None:
            return
        body = {
            "name": name, "node_list": list(nodes), "users": list(RESERVATION_USERS), "flags": list(RESERVATION_FLAGS),
            "start_time": _number(int(start.timestamp())), "end_time": _number(int(end.timestamp())),
        }  # fmt: skip
        _raise_errors(self._request("POST", f"/slurm/{api}/reservation", body))

    def reservation_delete(self, name: str) -> None:
        api = self.api()
        if api == "v0.0.38":
            raise SchedulerUnavailable(
                "slurmrestd v0.0.38 (Slurm 22.05) cannot delete reservations; use SLURM_MODE=cli"
            )
        if self.reservation(name) is None:
            return
        _raise_errors(self._request("DELETE", f"/slurm/{api}/reservation/{_quote(name)}"))


# slurmrestd's words for "slurmctld or slurmdbd did not answer it" (Slurm's error texts for the
# communication errors, the socket timeout and ESLURM_DB_CONNECTION): newer versions answer them
# with 502 or 504, older ones with 500.
_NOT_ANSWERING = (
    "Unable to contact slurm controller",
    "Unable to connect to database",
    "Socket timed out on send/recv operation",
    "Communication connection failure",
    "Message send failure",
    "Message receive failure",
    "Zero Bytes were transmitted or received",
)
_SILENT_STATUS = (502, 503, 504)  # slurmrestd's own for the above, or a proxy's before it
_SETUP_REFUSED = (401, 403, 511)  # the token (or slurmrestd's own authentication to slurmctld)


def _answered(status: int, detail: str, *, silent: bool) -> SchedulerUnavailable:
    """The error for an HTTP error answer: silence (SchedulerSilent) or a refusal."""
    message = f"slurmrestd answered {status}: {detail or 'no detail'}"
    if silent or status in _SILENT_STATUS:
        return SchedulerSilent(message)
    return SchedulerRefused(message, status=status)


def _number(value: int) -> dict:
    """slurmrestd's `*_no_val_struct`: a plain number is refused in a request."""
    return {"set": True, "infinite": False, "number": value}


def _quote(name: str) -> str:
    return urllib.request.quote(name, safe="")


def _error_text(payload: dict) -> str:
    errors = payload.get("errors") or []
    return "; ".join(str(e.get("error") or e.get("description") or e) for e in errors)[:300] or "no detail"


def _errors_say(payload: dict, *needles: str) -> bool:
    text = _error_text(payload)
    return any(needle in text for needle in needles)


def _raise_errors(payload: dict) -> None:
    if payload.get("errors"):
        raise SchedulerUnavailable(f"slurmrestd: {_error_text(payload)}")
