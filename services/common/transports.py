"""What every service's transport registry shares (``services.device.transports``,
``services.shuffler.transports``, ``services.analyzer.transports``): a task's transport is
looked up by the name it is configured with (``TaskConfig.transport``: ``reports``,
``paillier``, ``prio3``), and a name no transport is registered under is an error, never a
default."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar

from privbandit.shared.settings import Settings, TaskConfig

T = TypeVar("T")


def lookup(registry: Mapping[str, T], config: TaskConfig, service: str) -> T:
    """``registry[config.transport]``; ``ValueError`` naming the known transports if none
    is registered under that name."""
    try:
        return registry[config.transport]
    except KeyError:
        raise ValueError(
            f"task {config.id!r}: no {service} transport {config.transport!r} (known: "
            f"{', '.join(sorted(registry))})"
        ) from None


def tasks_by_transport(
    registry: Mapping[str, object], settings: Settings, service: str
) -> dict[str, list[TaskConfig]]:
    """The settings' tasks per registered transport name (every name, possibly no task)."""
    out: dict[str, list[TaskConfig]] = {name: [] for name in registry}
    for task in settings.tasks:
        lookup(registry, task, service)
        out[task.transport].append(task)
    return out


class Status(Protocol):
    def missing(self) -> list[str]: ...

    def health(self) -> dict[str, object]: ...


S = TypeVar("S", bound=Status)


class TransportSet(Generic[S]):
    """One object per registered transport (``by_name``, in registration order), each made
    by its ``registry`` entry from the tasks configured with it (possibly none) and the
    service's ``context``, for one service runtime; and which one serves each task."""

    def __init__(
        self,
        registry: Mapping[str, Callable[[list[TaskConfig], Any], S]],
        settings: Settings,
        context: object,
        service: str,
    ) -> None:
        tasks = tasks_by_transport(registry, settings, service)
        self.by_name = {name: make(tasks[name], context) for name, make in registry.items()}
        self._of_task = {t.id: self.by_name[t.transport] for t in settings.tasks}

    def __iter__(self) -> Iterator[S]:
        return iter(self.by_name.values())

    def __getitem__(self, name: str) -> S:
        return self.by_name[name]

    def of(self, task: str) -> S:
        """The transport of a configured task."""
        return self._of_task[task]

    def missing(self) -> list[str]:
        """What the transports still wait for (readiness)."""
        return [m for t in self for m in t.missing()]

    def health(self) -> dict[str, object]:
        """What ``/healthz`` says of the transports once ready, in registration order."""
        return {k: v for t in self for k, v in t.health().items()}
