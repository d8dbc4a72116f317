"""TextCraft: craft a goal item from Minecraft-style recipe trees with text commands (AgentGym's TextCraft).

Commands: `get N item` (base items only), `craft N target using N a, N b`, `inventory`. The reset
observation lists the crafting commands of the goal's recipe tree plus distractor recipes. Reward 1
when the goal item is in the inventory. Tasks are sampled by crafting depth (base items are depth 0;
an item is one deeper than its deepest ingredient).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from jgem.core import Env, StepResult
from jgem.envs.agentgym.textcraft_recipes import RecipeBook, load_book


def _item(name: str) -> str:
    """'minecraft:oak_planks' / 'Oak Planks' -> 'oak planks'."""
    return re.sub(r"\s+", " ", name.lower().removeprefix("minecraft:").replace("_", " ")).strip(" .")


_GET = re.compile(r"^get (\d+) (.+)$")
_CRAFT = re.compile(r"^craft (\d+) (.+?) using (.+)$")


class TextCraftEnv(Env):
    """Craft the goal item. `depth` fixes the goal's crafting depth (1..max); None draws it per episode.

    `recipes`: "jgem" (shipped), "textcraft" (the textcraft package's Minecraft recipes), a recipe .txt
    file or a directory of Minecraft recipe JSONs.
    """

    def __init__(
        self,
        depth: int | None = None,
        num_distractors: int = 4,
        max_turns: int = 40,
        recipes: str = "jgem",
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        self.book = load_book(recipes)
        self.max_depth = max(self.book.depth.values())
        if depth is not None and not 1 <= depth <= self.max_depth:
            raise ValueError(f"depth {depth} is out of range; the recipes have depths 1..{self.max_depth}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.depth, self.num_distractors, self.max_turns = depth, num_distractors, max_turns
        self.goal = ""
        self.inventory: Counter[str] = Counter()
        self.commands: list[str] = []
        self.turn = 0
        self.done = True

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        depth = self.depth or int(self.np_random.integers(1, self.max_depth + 1))
        goals = sorted(i for i, d in self.book.depth.items() if d == depth)
        self.goal = goals[int(self.np_random.integers(len(goals)))]
        tree = self.book.tree(self.goal)
        others = sorted(set(self.book.recipes) - {r.result for r in tree})
        picks = self.np_random.choice(len(others), size=min(self.num_distractors, len(others)), replace=False)
        cmds = [r.command() for r in tree] + [self.book.recipes[others[i]].command() for i in picks]
        self.commands = [cmds[i] for i in self.np_random.permutation(len(cmds))]
        self.inventory, self.turn, self.done = Counter(), 0, False
        obs = "Crafting commands:\n" + "\n".join(self.commands) + f"\n\nGoal: craft {self.goal}."
        return obs, {"goal": self.goal, "depth": depth}

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self.turn += 1
        a = re.sub(r"\s+", " ", action.strip().lower()).strip(" .")
        a = re.sub(r"^(action|act)\s*:\s*", "", a)
        valid = True
        if a == "inventory":
            obs = self._inventory_text()
        elif m := _GET.match(a):
            obs = self._get(int(m.group(1)), _item(m.group(2)))
        elif m := _CRAFT.match(a):
            obs = self._craft(int(m.group(1)), _item(m.group(2)), m.group(3))
        else:
            valid = False
            obs = (
                "Could not execute " + action.strip()[:200] + ". Use 'get N item', 'craft N target using "
                "N a, N b' or 'inventory'."
            )
        won = self.inventory[self.goal] > 0
        truncated = not won and self.turn >= self.max_turns
        self.done = won or truncated
        info: dict[str, Any] = {"action_is_valid": valid and not obs.startswith("Could not"), "turn": self.turn}
        if self.done:
            info["success"] = won
        return obs, 1.0 if won else 0.0, won, truncated, info

    def _inventory_text(self) -> str:
        items = " ".join(f"[{item}] ({n})" for item, n in sorted(self.inventory.items()) if n > 0)
        return f"Inventory: {items}" if items else "Inventory: You are not carrying anything."

    def _get(self, n: int, item: str) -> str:
        if n < 1 or not self.book.base(item) or item not in self.book.depth:
            return f"Could not find {n} {item}" + ("" if item in self.book.depth else " (no such item)")
        self.inventory[item] += n
        return f"Got {n} {item}"

    def _craft(self, n: int, target: str, using: str) -> str:
        recipe = self.book.recipes.get(target)
        given: Counter[str] = Counter()
        for part in using.split(","):
            m = re.match(r"^\s*(\d+) (.+?)\s*$", part)
            if not m:
                return f"Could not parse ingredient {part.strip()!r}; write ingredients as 'N item, N item'"
            given[_item(m.group(2))] += int(m.group(1))
        crafts = math.ceil(n / recipe.count) if recipe and n > 0 else 0
        if recipe is None or crafts == 0 or given != Counter({i: k * crafts for i, k in recipe.ingredients}):
            return f"Could not find a valid recipe for {n} {target} using {using.strip()}"
        missing = [f"{k} {i}" for i, k in given.items() if self.inventory[i] < k]
        if missing:
            return f"Could not find enough items to craft {n} {target}: missing {', '.join(missing)}"
        self.inventory -= given
        self.inventory[target] += crafts * recipe.count
        return f"Crafted {crafts * recipe.count} {target}"

    def sample_random_action(self) -> str:
        options = ["inventory", *self.commands]
        base = sorted(i for i in self.book.depth if self.book.base(i))
        options.append(f"get {int(self.np_random.integers(1, 5))} {base[int(self.np_random.integers(len(base)))]}")
        return options[int(self.np_random.integers(len(options)))]


def plan(book: RecipeBook, goal: str, inventory: Counter | None = None) -> list[str]:
    """A command sequence that crafts `goal` from base items (used by tests and as a reference agent)."""
    inv: Counter[str] = Counter(inventory or {})
    out: list[str] = []

    def obtain(item: str, n: int) -> None:
        short = n - inv[item]
        if short <= 0:
            return
        recipe = book.recipes.get(item)
        if recipe is None:
            out.append(f"get {short} {item}")
            inv[item] += short
            return
        crafts = math.ceil(short / recipe.count)
        for ing, k in recipe.ingredients:
            obtain(ing, k * crafts)
            inv[ing] -= k * crafts  # reserve them now, so a later ingredient's crafting cannot use them up
        inv[item] += crafts * recipe.count
        out.append(recipe.command(crafts))

    obtain(goal, 1)
    return out
