"""Walking a traced program's jaxpr: its equations and those of every jaxpr inside it."""

from collections.abc import Iterator
from typing import Any


def equations(jaxpr: Any) -> Iterator[Any]:
    """Every equation of ``jaxpr`` (a Jaxpr or ClosedJaxpr) and of the jaxprs in its equations' parameters (loop
    bodies, calls, kernel bodies), depth first, in order."""
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (list, tuple)) else [value]:
                if hasattr(getattr(sub, "jaxpr", sub), "eqns"):
                    yield from equations(sub)
