"""Deployment configuration shared by the three services (pydantic-settings).

One TOML file (path in ``PRIVBANDIT_CONFIG``; by default ``shared/defaults/privbandit.toml``,
package data read with ``importlib.resources``, so it is found from any install) holds the
service addresses, the shuffler's credential and the tasks; environment variables override it
(prefix ``PRIVBANDIT_``, nested with ``__``, e.g. ``PRIVBANDIT_ANALYZER__PORT=9000``). The same
file serves ``privbandit up`` and docker compose.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from privbandit.shared.core.accounting.ledger import Aggregation, SecureSum
from privbandit.shared.core.exploration import Exploration
from privbandit.shared.core.policies.bco_config import BCOConfig
from privbandit.shared.core.policies.config import AnyPolicyConfig, PolicyConfig
from privbandit.shared.core.policies.families import (
    ARMS,
    BCO_FAMILY,
    GLB,
    LINEAR,
    PHASE,
    Family,
)
from privbandit.shared.core.policies.registry import REGISTRY, PolicyEntry, entry, randomizer_for
from privbandit.shared.core.randomizers.base import SumEncoding, Summable
from privbandit.shared.core.schedule import BatchSchedule
from privbandit.shared.protocol.messages import MAX_DIM, MAX_REPORTS_PER_UPLOAD, TASK_ID_PATTERN

# A real file in a source checkout and in an installed wheel alike (setuptools package data).
DEFAULT_CONFIG = Path(
    str(resources.files("privbandit.shared").joinpath("defaults", "privbandit.toml"))
)


class ContributionBound(BaseModel):
    """At most ``k`` reports per person per period (issue 24), enforced by the device
    (``services.device.persons``) and composed by the ledgers
    (``shared.core.accounting.persons``). ``period_seconds``: the length of the period, in fixed
    windows counted from the Unix epoch (UTC); absent: forever (k reports in all)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    k: int = Field(ge=1, le=100_000, description="reports per person and period")
    period_seconds: int | None = Field(
        None, ge=60, le=10 * 366 * 86400, description="the period's length; absent: forever")

    @property
    def period(self) -> str:
        """The period in words, as the ledgers state it."""
        return "forever" if self.period_seconds is None else f"{self.period_seconds} s"


class TaskConfig(BaseModel):
    """One bandit problem: its threat model, policy and public parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=TASK_ID_PATTERN)
    threat_model: Literal["none", "ldp", "shuffle", "central"]
    K: int = Field(20, ge=2, le=1024, description="arms per decision")
    aggregation: Aggregation = "reports"
    # How a ``secure-sum`` task's sums are formed (issue 23; ``transport``): ``prio3``, each
    # report secret-shared between shuffler and analyzer with a validity proof, invalid ones
    # refused alone; ``paillier``, the earlier Paillier sum, which cannot check a report.
    secure_sum: SecureSum = "prio3"
    policy: AnyPolicyConfig
    # Returning users (issue 24): absent, a person's reports are not bounded and the ledger
    # states no guarantee per person.
    contributions: ContributionBound | None = None
    # An exploring logging policy on the device (issue 42): "epsilon-greedy:EPS" or
    # "softmax:TAU" (``core.exploration``); the device draws the arm from π_0 and answers its
    # exact propensity. Absent: the model's argmax. Linear and GLB tasks only.
    exploration: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TaskConfig:
        # The registry says which threat models and transports the policy serves (spec §3, §5).
        self.entry.check_task(self.threat_model, self.aggregation)
        if self.exploration is not None:
            if self.family not in (LINEAR, GLB):
                raise ValueError(f"task {self.id}: exploration is for the linear and GLB "
                                 f"policies (not {self.policy.algo})")
            Exploration.parse(self.exploration)  # ValueError names the accepted forms
        if isinstance(self.policy, PolicyConfig) and self.policy.d > MAX_DIM:
            # The simulator and the library take larger d (``MAX_FEATURE_DIM``); the wire's
            # models and decisions carry at most MAX_DIM coordinates.
            raise ValueError(f"task {self.id}: the services serve d <= {MAX_DIM} "
                             f"(policy.d = {self.policy.d})")
        if getattr(self.policy, "public_warm_start", 0):
            # The services have no way to receive the public log: a ledger naming public rounds
            # that were never learned from would misstate what the models are built on.
            raise ValueError(f"task {self.id}: the services take no public warm start "
                             "(policy.public_warm_start must be 0; the simulator and the "
                             "library take it)")
        if self.threat_model == "ldp" and self.batch_size != 1:
            raise ValueError("ldp tasks are pass-through: batch size must be 1")
        schedule = getattr(self.policy, "batch_schedule", None)
        if schedule is not None and not entry(self.policy.algo).scheduled:
            # The shuffler forms any schedule (``policy.schedule``); the device and analyzer
            # sides that size the noise per batch exist for the ``Scheduled`` policies only.
            scheduled = sorted(a for a, e in REGISTRY.items() if e.scheduled)
            raise ValueError(f"task {self.id}: the services run batch schedules for "
                             f"{', '.join(scheduled)} only; set "
                             f"policy.batch_size (batch_schedule {schedule!r} "
                             "is for the simulator)")
        if getattr(self.policy, "accountant", None) == "secure-sum" and (
            self.aggregation != "secure-sum"
        ):
            # sblb's ε0 sized by the sum-only accountant needs a shuffler that releases only sums.
            raise ValueError(f"task {self.id}: policy.accountant = 'secure-sum' sizes ε0 for "
                             "batch sums; set aggregation = 'secure-sum' or accountant = 'reports'")
        if (self.aggregation == "secure-sum" and self.secure_sum == "paillier"
                and getattr(self.policy, "noise", None) == "aggregators"):
            # Paillier cannot check a report's range, and only the prio3 aggregators add noise.
            raise ValueError(f"task {self.id}: ddp-linucb's noise by the aggregators needs "
                             "secure_sum = 'prio3'; with secure_sum = 'paillier' set "
                             "policy.noise = 'devices' (device shares, honest fraction γ)")
        if self.fixed_arms and getattr(self.policy, "arm_seed", None) is None:
            raise ValueError("an adar-gope task defines its fixed arms: set policy.K and "
                             "policy.arm_seed")
        policy_K = getattr(self.policy, "K", None)  # the arm-set policies' own K
        if (self.multi_armed or self.fixed_arms) and policy_K != self.K:
            raise ValueError(
                f"task K = {self.K} but its policy has K = {policy_K}: "
                "set both to the number of arms"
            )
        return self

    @property
    def transport(self) -> str:
        """The shuffle transport's name in the services' registries, on the wire and in the
        device's outbox: ``reports``, or for a ``secure-sum`` task its ``secure_sum``,
        ``prio3`` or ``paillier``. (``secure-sum`` names any secure sum, as in the registry's
        ``transports`` and the accountants; the Paillier transport was once called that too:
        the device store's migration 6 renames its queued rows.)"""
        if self.aggregation == "secure-sum":
            return self.secure_sum
        return self.aggregation

    @property
    def entry(self) -> PolicyEntry:
        """The task's policy in the registry (``shared.core.policies.registry``)."""
        return entry(self.policy.algo)

    @property
    def family(self) -> Family[Any, Any]:
        """How the task's model is published, read back and decided from
        (``shared.core.policies.families``)."""
        return self.entry.family

    @property
    def multi_armed(self) -> bool:
        """A context-free task: K arms, decide takes no features (``policies.mab_config``)."""
        return self.family is ARMS

    @property
    def fixed_arms(self) -> bool:
        """A phased-elimination task (``adar-gope``): K fixed arms of its own
        (``policy.arm_seed``), decide takes no features and the device draws the arm from the
        phase's design."""
        return self.family is PHASE

    @property
    def glb(self) -> bool:
        """An ``ldp-glb`` task: its model carries θ̂, its reports name the model version."""
        return self.family is GLB

    @property
    def bco(self) -> bool:
        """A bandit-convex-optimisation task: decide takes no features and returns the point(s)
        to play; feedback carries the loss(es) (``policies.bco_config``)."""
        return self.family is BCO_FAMILY

    @property
    def bco_points(self) -> int:
        """Points a user of a BCO task plays: 1 (``bco``, ``ldp-bco``) or 2 (``bco2``,
        ``ldp-bco2``)."""
        policy = self.policy
        if not isinstance(policy, BCOConfig):
            raise ValueError(f"task {self.id} ({policy.algo}) is not a BCO task")
        return policy.points_per_user

    @property
    def batch_size(self) -> int:
        """The shuffler's first batch l₀ (1 = pass-through); every batch of a fixed schedule."""
        return int(getattr(self.policy, "batch_size", 1))

    @property
    def schedule(self) -> BatchSchedule:
        """The lengths l_k of the batches the shuffler forms (``core.schedule``): the
        policy's own ``schedule`` if it has one (``ddp-linucb``), else fixed ``batch_size``."""
        schedule = getattr(self.policy, "schedule", None)
        if isinstance(schedule, BatchSchedule):
            return schedule
        return BatchSchedule(self.batch_size)

    @property
    def max_batch(self) -> int:
        """The longest batch the schedule forms (its cap): what a batch sum's slots and an
        upload's size limits are sized for."""
        return self.schedule.max_size

    def sum_encoding(self) -> SumEncoding:
        """How a report of this task enters a secure sum (``randomizers.base.Summable``): what
        the Paillier slot layout and the Prio3 circuit are built from. ``ValueError`` for a
        policy whose randomizer is not summable."""
        randomizer = randomizer_for(self.policy)
        if not isinstance(randomizer, Summable):
            summable = ", ".join(a for a, e in REGISTRY.items() if "secure-sum" in e.transports)
            raise ValueError(f"task {self.id!r}: a secure sum adds the reports of a summable "
                             f"randomizer ({summable}), not {type(randomizer).__name__}")
        return randomizer.sum_encoding()


class ServiceAddress(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def is_postgres(store: str) -> bool:
    """Whether a ``store`` setting names a PostgreSQL database (else it is ``"sqlite"``)."""
    return store.startswith(("postgresql://", "postgres://"))


class StoredService(ServiceAddress):
    """A service that keeps state: its address and where the state lives. ``store`` is
    ``"sqlite"`` (the default: a file in ``data_dir``, nothing to install) or a libpq URL
    ``postgresql://user@host:port/db`` (``?options=-csearch_path%3Dschema`` picks a schema).
    Env: ``PRIVBANDIT_SHUFFLER__STORE`` / ``PRIVBANDIT_ANALYZER__STORE``."""

    store: str = "sqlite"

    @model_validator(mode="after")
    def _known_store(self) -> StoredService:
        if self.store != "sqlite" and not is_postgres(self.store):
            raise ValueError(
                f"store must be 'sqlite' or a postgresql:// URL, not {self.store!r}"
            )
        return self

    @property
    def postgres(self) -> bool:
        return is_postgres(self.store)


class ShufflerService(StoredService):
    """The shuffler: replicas on one PostgreSQL store each listen on an address of their own;
    ``urls`` lists them all (the device spreads its uploads across them). Empty: ``url`` only."""

    urls: list[str] = Field(default_factory=list)
    # PostgreSQL replicas: seconds without a heartbeat (one a second) after which a replica is
    # taken for dead and the batches it formed are delivered by another.
    replica_timeout: float = Field(5.0, gt=1.0)

    @property
    def all_urls(self) -> list[str]:
        return list(self.urls) or [self.url]


def _origin(value: str) -> str:
    """A browser origin as a browser sends it in ``Origin``: ``http(s)://host[:port]``, lower
    case, no path, no trailing slash; never ``*`` nor ``null`` (any page, resp. sandboxed or
    local pages, would be let in)."""
    if not ORIGIN.fullmatch(value):
        raise ValueError(
            f"browser origin {value!r} must be scheme://host[:port] (http or https, lower case, "
            "no path, no wildcard)")
    return value


ORIGIN = re.compile(r"https?://[a-z0-9.-]+(?::[0-9]{1,5})?|https?://\[[0-9a-f:.]+\](?::[0-9]{1,5})?")
BrowserOrigin = Annotated[str, AfterValidator(_origin)]

# A duration in seconds.
Seconds = Annotated[float, Field(gt=0)]


class Retry(BaseModel):
    """A retry schedule: wait ``initial`` seconds, doubling after each failure up to
    ``maximum``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial: Seconds
    maximum: Seconds

    @model_validator(mode="after")
    def _ordered(self) -> Retry:
        if self.initial > self.maximum:
            raise ValueError("a retry schedule's initial wait must not exceed its maximum")
        return self


class DeviceTiming(BaseModel):
    """The device service's intervals, time-outs, retry schedules and pool sizes (seconds unless
    said otherwise). Override like any setting: ``[device_timing]`` in the config file, or e.g.
    ``PRIVBANDIT_DEVICE_TIMING__POLL_INTERVAL=0.5``,
    ``PRIVBANDIT_DEVICE_TIMING__UPLOAD_RETRY__MAXIMUM=10``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Fetches from the analyzer (models at start-up, the HPKE config, the Paillier configs),
    # retried with jitter.
    fetch_retry: Retry = Retry(initial=0.1, maximum=2.0)
    # Model polling period while the SSE stream is down.
    poll_interval: Seconds = 1.0
    # After a stream failure, poll this long before trying the stream again (doubling); a
    # stream that stayed up longer than the maximum was healthy and is retried soon.
    stream_retry: Retry = Retry(initial=2.0, maximum=30.0)
    # A stream silent for this long is assumed dead and reopened (a healthy analyzer sends at
    # least keep-alive comments).
    stream_read_timeout: Seconds = 60.0
    # Routine re-fetches of a known HPKE config and of a secure-sum task's Paillier config.
    hpke_refresh: Seconds = 60.0
    paillier_refresh: Seconds = 60.0
    # Precomputed Paillier obfuscators r^n mod n² kept per secure-sum task (a count). One costs
    # ~10 ms of CPU at 2048 bits and 512 bytes; 256 absorb a burst of a few seconds of feedback
    # before encryption falls back to computing r^n per request.
    paillier_pool: int = Field(256, ge=1)
    # Processes computing those obfuscators, at a lower scheduling priority than the request path
    # (a count; one suffices for ~100 reports/s per core); 0: a thread of the device process.
    paillier_workers: int = Field(1, ge=0, le=64)
    # Outbox: reports per upload to the shuffler (a count), and the retries of a (task,
    # transport) group whose upload failed (with jitter; a Retry-After header is a lower bound).
    upload_batch: int = Field(100, ge=1, le=MAX_REPORTS_PER_UPLOAD)
    upload_retry: Retry = Retry(initial=0.1, maximum=5.0)
    # Decisions: an id opens for feedback for ``unused_decision_ttl`` after ``decide`` issued it
    # (later: 404 ``unknown_decision``); the tombstone of a used decision is kept
    # ``used_decision_ttl`` after its issue (so a late duplicate feedback still gets 409) and
    # must outlive the id's validity, or a used id could be replayed. The pruner forgets older
    # tombstones every ``prune_interval``. An open decision is not stored at all (its state is
    # sealed in its id: ``services.device.decision_ids``).
    used_decision_ttl: Seconds = 3600.0
    unused_decision_ttl: Seconds = 600.0
    prune_interval: Seconds = 60.0
    # Time-out of a request to the analyzer or the shuffler (streams: ``stream_read_timeout``).
    http_timeout: Seconds = 10.0

    @model_validator(mode="after")
    def _tombstones_outlive_ids(self) -> DeviceTiming:
        if self.used_decision_ttl < self.unused_decision_ttl:
            raise ValueError(
                f"used_decision_ttl ({self.used_decision_ttl:g} s) must be at least "
                f"unused_decision_ttl ({self.unused_decision_ttl:g} s): a used decision's "
                "tombstone must outlive its id, or the id could take a second feedback")
        return self


class Limits(BaseModel):
    """Bounds on what clients can hold open or make the services queue. Beyond each, the request
    is refused before anything is stored, with a ``Retry-After`` header (``retry_after``
    seconds), a code of its own and a metric; a client retries later. Override like any setting:
    ``[limits]`` in the config file, or e.g. ``PRIVBANDIT_LIMITS__MODEL_STREAMS=256``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Analyzer: model streams (SSE, ``GET /v1/tasks/{task}/model/stream``) open at once, all
    # tasks together; one more is 503 ``too_many_streams`` (a device then polls the model with
    # ETags, which costs a 304 per poll, and retries the stream later).
    model_streams: int = Field(1024, ge=1)
    # Device: sealed reports in the outbox, not yet accepted by the shuffler; a feedback that
    # would exceed it is 429 ``outbox_full`` (its decision stays open: retry the feedback within
    # ``device_timing.unused_decision_ttl``). ~0.2 kB per HPKE report, ~0.7 kB per secure-sum one.
    outbox_reports: int = Field(100_000, ge=1)
    # Shuffler, per task: reports stored and not yet acknowledged by the analyzer (waiting for
    # their batch to fill, or in a batch not yet acknowledged). An upload arriving when this
    # many are stored is 429 ``queue_full`` (so at most one upload beyond it is ever stored);
    # devices keep the reports in their durable outboxes meanwhile. At least every task's batch
    # size l (else a batch could never fill).
    shuffler_reports: int = Field(1_000_000, ge=1)
    # Requests a service works on at once (admitted and not yet answered), per service; one
    # more is 503 ``overloaded`` with the Retry-After below, answered before its body is read
    # (``services.common.admission``). ``/healthz``, ``/metrics`` and the analyzer's model
    # streams (bounded by ``model_streams``) are not counted. The device's default keeps decide
    # p99 at 200 concurrent clients within 2× of its p99 at 50 on a 2-core machine
    # (docs/benchmarks/load.md, "Overload"): beyond ~50 requests in flight a request only waits
    # longer.
    device_requests: int = Field(64, ge=1)
    shuffler_requests: int = Field(256, ge=1)
    analyzer_requests: int = Field(256, ge=1)
    # The ``Retry-After`` of these refusals (seconds).
    retry_after: int = Field(1, ge=1, le=3600)

    def requests(self, service: str) -> int | None:
        """The in-flight bound of ``service`` (``device``, ``shuffler`` or ``analyzer``; None
        for another name)."""
        bound = getattr(self, f"{service}_requests", None)
        return None if bound is None else int(bound)


class Connections(BaseModel):
    """What one HTTP connection may hold, the same in every service (uvicorn's set-up:
    ``services.common.server``). Override like any setting: ``[connections]`` in the config
    file, or e.g. ``PRIVBANDIT_CONNECTIONS__HEADER_TIMEOUT=5``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A connection whose request head (request line and headers) is not complete this long
    # after its first byte (or, on a new connection, after it opened) is closed: a client
    # sending partial headers holds a socket and memory (slowloris).
    header_timeout: Seconds = 10.0
    # A keep-alive connection idle this long between requests is closed (uvicorn's
    # ``timeout_keep_alive``; whole seconds).
    idle_timeout: int = Field(5, ge=1, le=3600)
    # Connections open at once per service process; a request on one beyond it is answered 503
    # by uvicorn (``limit_concurrency``, which also bounds requests in flight). Above
    # ``limits.model_streams`` (each model stream holds a connection of the analyzer) and below
    # the process's file-descriptor limit.
    max_connections: int = Field(4096, ge=16)


class Settings(BaseSettings):
    """Everything a service needs to know about the deployment."""

    # An empty variable counts as unset (the setting keeps its default): compose passes an
    # optional setting it has no value for as an empty string (docker-compose.yml).
    model_config = SettingsConfigDict(
        env_prefix="PRIVBANDIT_", env_nested_delimiter="__", extra="forbid",
        env_ignore_empty=True,
    )

    analyzer: StoredService = StoredService(port=8701)
    shuffler: ShufflerService = ShufflerService(port=8702)
    device: ServiceAddress = ServiceAddress(port=8703)
    # Where each service keeps its SQLite files and keys (one subdirectory per service).
    data_dir: Path = Path("data")
    # Bearer token the shuffler presents to the analyzer's batch endpoint. No default: the
    # analyzer and the shuffler refuse to start without a usable one (``shuffler_token_problem``);
    # the device does not use it. ``privbandit up`` generates one per data directory.
    shuffler_token: str | None = None
    # The token read from a file instead (``PRIVBANDIT_SHUFFLER_TOKEN_FILE``): a compose or
    # Kubernetes secret mounted at e.g. /run/secrets/shuffler_token, so that the token is in no
    # environment and no printed configuration (``docker-compose config``). One or the other.
    shuffler_token_file: Path | None = None
    # Shuffler: how long to wait before retrying an unacknowledged batch (seconds, doubling).
    retry_initial: float = Field(0.2, gt=0)
    retry_max: float = Field(10.0, gt=0)
    device_timing: DeviceTiming = DeviceTiming()
    limits: Limits = Limits()
    connections: Connections = Connections()
    log_level: str = "info"
    # ``json``: one JSON object per log line (services.common.logs), for a log collector.
    log_format: Literal["text", "json"] = "text"
    tasks: list[TaskConfig] = Field(default_factory=list)
    # Origins (``scheme://host[:port]``) whose pages may call the analyzer's and the shuffler's
    # browser routes (``services.common.cors``, docs/web-client.md); none by default. Env:
    # ``PRIVBANDIT_BROWSER_ORIGINS='["https://shop.example"]'``.
    browser_origins: list[BrowserOrigin] = Field(default_factory=list)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = Path(os.environ.get("PRIVBANDIT_CONFIG", DEFAULT_CONFIG))
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if path.exists():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    @model_validator(mode="after")
    def _unique_tasks(self) -> Settings:
        ids = [t.id for t in self.tasks]
        if len(ids) != len(set(ids)):
            raise ValueError("task ids must be unique")
        return self

    @model_validator(mode="after")
    def _token_from_file(self) -> Settings:
        """``shuffler_token`` from ``shuffler_token_file`` (its one line, without the line
        break); whether it is usable is judged where it is used (``shuffler_token_problem``)."""
        path = self.shuffler_token_file
        if path is None:
            return self
        if self.shuffler_token is not None:
            raise ValueError("set shuffler_token or shuffler_token_file, not both")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"shuffler_token_file: cannot read {path}: {exc}") from None
        self.shuffler_token = text.rstrip("\r\n") or None
        self.shuffler_token_file = None  # read: the settings now hold the token itself
        return self

    @model_validator(mode="after")
    def _retry_bounds(self) -> Settings:
        if self.retry_initial > self.retry_max:
            raise ValueError("retry_initial must not exceed retry_max")
        return self

    @model_validator(mode="after")
    def _room_for_a_batch(self) -> Settings:
        largest = max((t.max_batch for t in self.tasks), default=1)
        if self.limits.shuffler_reports < largest:
            raise ValueError(
                f"limits.shuffler_reports = {self.limits.shuffler_reports} is below the batch "
                f"length l = {largest} of a task (its schedule's cap): its batches could never fill"
            )
        return self

    @model_validator(mode="after")
    def _streams_fit(self) -> Settings:
        if self.connections.max_connections <= self.limits.model_streams:
            raise ValueError(
                f"connections.max_connections = {self.connections.max_connections} must exceed "
                f"limits.model_streams = {self.limits.model_streams}: every model stream holds "
                "a connection of the analyzer")
        return self

    def task(self, task_id: str) -> TaskConfig | None:
        return next((t for t in self.tasks if t.id == task_id), None)
