"""Repository envs (`swe:` ids): fix a package's injected bug with tools, graded by its own tests (SWE-bench's way).

`swe:built` plays the tasks `python -m jgem.envs.swe.build` built under `data_dir=` (or $JGEM_DATA/swe), one drawn
per reset (`task=` picks one by id or unique prefix, `tasks=` a set). Registration imports nothing else.
"""

from jgem.registry import register

register("swe:built", "jgem.envs.swe.env:SWEEnv")
