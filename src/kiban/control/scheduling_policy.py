"""The parts of the cluster policy that a scheduling pass needs, in the core's terms."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kiban.domain.priority import DEFAULT_PRIORITY_CLASS
from kiban.scheduler.snapshot import DEFAULT_FLAVOR, FlavorView

WEEK_S = 7 * 86400.0


@dataclass(frozen=True)
class FlavorRule:
    """A flavor and the node labels that select it."""

    view: FlavorView
    node_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SchedulingPolicy:
    """Flavors, topology levels, priority classes' preemption and fair-share settings.

    With no flavors declared, every node is of the flavor ``default``.
    """

    flavors: tuple[FlavorRule, ...] = (FlavorRule(FlavorView(DEFAULT_FLAVOR)),)
    topology: tuple[tuple[str, str], ...] = ()  # (level name, node label), outermost first
    preempting_classes: frozenset[str] = frozenset({"high"})
    min_runtime_s: Mapping[str, float] = field(default_factory=dict)
    default_class: str = DEFAULT_PRIORITY_CLASS
    half_life_s: float = WEEK_S
    resource_weights: Mapping[str, float] = field(default_factory=lambda: {"gpu": 1.0})

    @property
    def flavor_views(self) -> tuple[FlavorView, ...]:
        return tuple(rule.view for rule in self.flavors)

    @property
    def topology_levels(self) -> tuple[str, ...]:
        return tuple(name for name, _label in self.topology)

    def flavor_of(self, labels: Mapping[str, str]) -> str | None:
        """The first flavor whose labels the node has (None: it matches no flavor)."""
        for rule in self.flavors:
            if all(labels.get(k) == v for k, v in rule.node_labels.items()):
                return rule.view.name
        return None

    def topology_path(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        """The node's domain at each level, outermost first (empty when unlabelled)."""
        return tuple(labels.get(label, "") for _name, label in self.topology)


DEFAULT_SCHEDULING = SchedulingPolicy()
