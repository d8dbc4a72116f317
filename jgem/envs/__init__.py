"""Built-in environment suites. Importing this registers their ids (cheap: no suite is imported)."""

from jgem.envs import (
    agentgym,  # noqa: F401  agentgym:*
    games,  # noqa: F401  game:*
    multiagent,  # noqa: F401  multi:*
    suites,  # noqa: F401  math:*, code:*, qa:*, rg:*
    swe,  # noqa: F401  swe:*
    terminal,  # noqa: F401  terminal:*
    web,  # noqa: F401  web:*, agentgym:WebArena-v0
)
