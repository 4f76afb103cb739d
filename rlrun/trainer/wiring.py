"""Orders and checks the hooks of a run from what they declare.

Each hook point runs its hooks in an order derived from their declarations:
a hook that writes a key comes before the hooks that read it at the same
point, and a hook comes after the hooks named in its ``after``; otherwise the
config's order is kept. A key read before any point has written it (a
consumer at an earlier point than its producer, or no producer at all) is a
``ConfigError`` naming both hooks, raised when the run is built rather than as
a ``KeyError`` deep inside a loss.

Examples:
    >>> from rlrun.trainer.hooks import GAE, OnPolicyMinibatches
    >>> hooks = {"buffer": OnPolicyMinibatches(stores=("advantage",)), "gae": GAE(0.99)}
    >>> plan(hooks, provided={"observation", "next.observation", "next.reward",
    ...                       "next.terminated", "next.done"})["pre_epoch"]
    ['gae', 'buffer']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rlrun.core.errors import ConfigError
from rlrun.trainer.hooks import HOOK_POINTS, Hook


def implements(hook: Hook, point: str) -> bool:
    """Whether ``hook`` overrides ``point`` (the base class's points do nothing)."""
    return getattr(type(hook), point) is not getattr(Hook, point)


def plan(hooks: Mapping[str, Hook], provided: Iterable[str] | None,
         loss_reads: Iterable[str] = (), loss_name: str = "the loss") -> dict[str, list[str]]:
    """The hooks of every point in run order, checked against their declared keys.

    Args:
        hooks: Named hooks in config order.
        provided: Keys every batch holds before any hook runs (the collector's); None: the
            hooks are ordered but no key is checked (components that declare nothing).
        loss_reads: Keys the loss reads from its samples.
        loss_name: How to name the loss in errors.

    Returns:
        ``{point: [hook name, ...]}``.

    Raises:
        ConfigError: A key read before it is written, a key nothing writes, or a cycle.
    """
    io = {name: h.io() for name, h in hooks.items()}
    first_writer: dict[str, tuple[str, str]] = {}
    for point in HOOK_POINTS:
        for name in hooks:
            for key in io[name].get(point, ((), ()))[1]:
                first_writer.setdefault(key, (name, point))
    check = provided is not None
    available = set(provided or ())
    order: dict[str, list[str]] = {}
    for point in HOOK_POINTS:
        names = [n for n, h in hooks.items() if implements(h, point) or point in io[n]]
        order[point] = _sort(point, names, hooks, io)
        for name in order[point]:
            reads, writes = io[name].get(point, ((), ()))
            for key in reads:
                if check and key not in available:
                    _missing(key, f"hooks.{name}", f"hook {name!r}", point, first_writer)
            available.update(writes)
        if check and point == "process_optim_batch":
            for key in loss_reads:
                if key not in available:
                    _missing(key, "loss", loss_name, point, first_writer)
    return order


def _missing(key: str, config_key: str, reader: str, point: str,
             first_writer: dict[str, tuple[str, str]]) -> None:
    if key in first_writer:
        writer, at = first_writer[key]
        raise ConfigError(
            f"{reader} reads {key!r} at {point}, but hook {writer!r} writes it only at {at}, later "
            "in the loop", key=config_key,
            fix=f"{reader} must read it at {at} or later, after {writer!r}, or one of the two must go "
            "(`rlrun explain <overrides>` shows every point's hooks)")
    raise ConfigError(
        f"{reader} reads {key!r} at {point}, but neither the collector nor any hook writes it",
        key=config_key,
        fix="add the hook that computes it (e.g. hooks.gae for 'advantage' and 'value_target'); "
        "`rlrun list hook` lists them")


def _sort(point: str, names: list[str], hooks: Mapping[str, Hook], io: dict) -> list[str]:
    """Stable topological order: writers before readers of a key, ``after`` respected."""
    before: dict[str, set[str]] = {n: set() for n in names}
    for reader in names:
        reads = set(io[reader].get(point, ((), ()))[0])
        for writer in names:
            if writer != reader and reads & set(io[writer].get(point, ((), ()))[1]):
                before[reader].add(writer)
        before[reader].update(a for a in type(hooks[reader]).after if a in before and a != reader)
    done: list[str] = []
    pending = list(names)
    while pending:
        ready = next((n for n in pending if before[n] <= set(done)), None)
        if ready is None:
            a = pending[0]
            b = next(iter(before[a] - set(done)))
            raise ConfigError(f"hooks {a!r} and {b!r} each need the other to run first at {point}",
                              key=f"hooks.{a}", fix=f"remove hooks.{a} or hooks.{b}")
        done.append(ready)
        pending.remove(ready)
    return done


def describe(order: dict[str, list[str]], hooks: Mapping[str, Hook],
             origins: Mapping[str, str]) -> str:
    """The resolved hook order per point, with each hook's declared keys and where it comes from."""
    lines = []
    for point in HOOK_POINTS:
        if not order.get(point):
            continue
        lines.append(f"{point}:")
        for name in order[point]:
            reads, writes = hooks[name].io().get(point, ((), ()))
            keys = "".join([f"  reads {', '.join(reads)}" if reads else "",
                            f"  writes {', '.join(writes)}" if writes else ""])
            lines.append(f"  {name:<18} {type(hooks[name]).__name__:<16} [{origins.get(name, '')}]{keys}")
    return "\n".join(lines)
