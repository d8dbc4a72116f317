"""BabyAI's egocentric view as text, and macro actions planned on the visible cells (after AgentGym).

`perceive(u)` reads what the agent sees in a minigrid env `u`; `describe` renders it; `macro_actions`
maps every currently available text action to the minigrid primitive actions that carry it out.
Plans use only visible cells (the agent does not know the rest of the map), by breadth-first search
over (position, direction) states, so turns are counted like steps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

# minigrid.core.actions.Actions values; fixed by minigrid and repeated here to keep this module import-light
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE, DONE = range(7)
DIR_TO_VEC = ((1, 0), (0, 1), (-1, 0), (0, -1))
_BLOCKS = ("wall", "box", "ball", "key", "lava")  # never stepped on by a plan (lava: it ends the episode)


@dataclass(frozen=True)
class Seen:
    """One visible object. `front`/`right` are steps ahead/right of the agent (negative: behind/left)."""

    name: str  # "red ball", "blue locked door", "green goal"
    kind: str  # minigrid type: ball, key, box, door, goal, lava, wall
    pos: tuple[int, int]
    front: int
    right: int
    color: str
    state: str = ""  # doors: open / closed / locked


@dataclass(frozen=True)
class View:
    pos: tuple[int, int]
    dir: int
    objects: tuple[Seen, ...]  # nearest first, walls excluded
    free: frozenset[tuple[int, int]]  # visible cells a plan may step on
    front_cell: Any  # the minigrid object in front of the agent, or None
    front_pos: tuple[int, int]
    wall_ahead: int | None  # steps to the nearest wall or box straight ahead, if visible
    carrying: Any


def perceive(u: Any) -> View:
    """What the agent of minigrid env `u` sees now."""
    _, vis = u.gen_obs_grid()
    vs = u.agent_view_size
    ax, ay = int(u.agent_pos[0]), int(u.agent_pos[1])
    d = int(u.agent_dir)
    fx, fy = DIR_TO_VEC[d]
    rx, ry = DIR_TO_VEC[(d + 1) % 4]
    objects, free, wall_ahead = [], {(ax, ay)}, None
    for i in range(vs):
        for j in range(vs):
            if not vis[i, j]:
                continue
            right, front = i - vs // 2, vs - 1 - j
            if right == 0 and front == 0:
                continue  # the agent's own cell (where the view shows the carried object)
            x, y = ax + front * fx + right * rx, ay + front * fy + right * ry
            if not (0 <= x < u.grid.width and 0 <= y < u.grid.height):
                continue
            obj = u.grid.get(x, y)
            if obj is None:
                free.add((x, y))
                continue
            if obj.type in ("wall", "box") and right == 0 and front > 0:
                wall_ahead = front if wall_ahead is None else min(wall_ahead, front)
            if obj.type not in _BLOCKS and obj.can_overlap():
                free.add((x, y))
            if obj.type == "wall":
                continue
            state = ""
            if obj.type == "door":
                state = "locked" if obj.is_locked else "open" if obj.is_open else "closed"
            name = f"{obj.color} {state} door" if state else f"{obj.color} {obj.type}"
            objects.append(Seen(name, obj.type, (x, y), front, right, obj.color, state))
    objects.sort(key=lambda o: (abs(o.front) + abs(o.right), -o.front, o.right))
    front_pos = (ax + fx, ay + fy)
    in_grid = 0 <= front_pos[0] < u.grid.width and 0 <= front_pos[1] < u.grid.height
    front_cell = u.grid.get(*front_pos) if in_grid else None
    return View((ax, ay), d, tuple(objects), frozenset(free), front_cell, front_pos, wall_ahead, u.carrying)


def numbered(objects: tuple[Seen, ...]) -> list[tuple[str, Seen]]:
    """Each object with its AgentGym label: name and rank among same-named objects ("red ball 2")."""
    counts: dict[str, int] = {}
    out = []
    for o in objects:
        counts[o.name] = counts.get(o.name, 0) + 1
        out.append((f"{o.name} {counts[o.name]}", o))
    return out


def describe(view: View) -> str:
    """The view in words: objects with relative positions, the wall ahead, what the agent carries."""
    parts = []
    for label, o in numbered(view.objects):
        side = "" if o.right == 0 else f" and {abs(o.right)} steps to your {'right' if o.right > 0 else 'left'}"
        where = f"right in front of you {o.front} steps away" if o.right == 0 else f"{o.front} steps in front of you"
        parts.append(f"There is a {label} {where}{side}.")
    text = (
        ("In front of you in this room, you can see several objects: " + " ".join(parts))
        if parts
        else ("You cannot see any objects within sight.")
    )
    text += " The room has walls around you."
    if view.wall_ahead is not None:
        text += f" You are facing a wall {view.wall_ahead} steps away."
    c = view.carrying
    text += f" You are carrying a {c.color} {c.type}." if c is not None else " You are not carrying anything."
    return text


def find_path(view: View, target: tuple[int, int], arrive: bool) -> list[int] | None:
    """Shortest primitive sequence to face `target` (or, with `arrive`, to stand on it), via free cells."""
    start = (view.pos, view.dir)
    parent: dict[tuple, tuple] = {start: (None, None)}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        (x, y), d = state
        dx, dy = DIR_TO_VEC[d]
        if ((x, y) == target) if arrive else ((x + dx, y + dy) == target):
            path = []
            while parent[state][0] is not None:
                state, action = parent[state]
                path.append(action)
            return path[::-1]
        moves = [((x, y), (d - 1) % 4, LEFT), ((x, y), (d + 1) % 4, RIGHT)]
        nxt = (x + dx, y + dy)
        if nxt in view.free or (arrive and nxt == target):
            moves.insert(0, (nxt, d, FORWARD))
        for pos, nd, action in moves:
            if (pos, nd) not in parent:
                parent[(pos, nd)] = (state, action)
                queue.append((pos, nd))
    return None


def macro_actions(view: View) -> tuple[dict[str, list[int]], dict[str, str]]:
    """Available text actions -> primitive plans, and why some visible-object actions are unavailable."""
    acts: dict[str, list[int]] = {"turn left": [LEFT], "turn right": [RIGHT]}
    why: dict[str, str] = {}
    front = view.front_cell
    if front is None or (front.can_overlap() and front.type != "lava"):
        acts["move forward"] = [FORWARD]
    else:
        why["move forward"] = f"There is a {front.type} in front of you, you can't move forward."
    carrying = view.carrying
    for label, o in numbered(view.objects):
        if o.kind == "goal":
            path = find_path(view, o.pos, arrive=True)
            if path is not None:
                acts["go to goal" if "go to goal" not in acts else f"go to {label}"] = path
            continue
        if o.kind == "lava":
            continue
        face = find_path(view, o.pos, arrive=False)
        if face is None:
            why[f"go to {label}"] = f"You cannot go to {label}, as there is no path leading to it."
            continue
        acts[f"go to {label}"] = face
        if o.kind in ("ball", "key", "box"):
            if carrying is None:
                acts[f"pick up {label}"] = face + [PICKUP]
            else:
                why[f"pick up {label}"] = f"You cannot pick up {label}, as you are already carrying something."
        elif o.kind == "door":
            if o.state == "open":
                through = find_path(view, o.pos, arrive=True)
                if through is not None:
                    acts[f"go through {label}"] = through
            elif o.state == "closed" or (carrying is not None and carrying.type == "key" and carrying.color == o.color):
                acts[f"toggle and go through {label}"] = face + [TOGGLE, FORWARD]
            else:
                why[f"toggle and go through {label}"] = (
                    f"You cannot toggle and go through {label}, as you are not carrying a {o.color} key."
                )
    if front is not None and front.type in ("door", "box"):
        acts["toggle"] = [TOGGLE]
    if carrying is not None:
        if front is None:
            acts["drop"] = [DROP]
        else:
            why["drop"] = "You cannot drop the object, as there is already an object in front of you."
    else:
        why["drop"] = "You cannot drop the object, as you are not carrying anything."
    acts["check available actions"] = []
    return acts, why
