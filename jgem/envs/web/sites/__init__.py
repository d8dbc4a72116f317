"""Sites jgem ships for its web envs: a shop and a forum in the image of WebArena's, served on loopback.

`ShopSite` (shop.py) and `ForumSite` (forum.py) are `Site`s (base.py): a Starlette app over an in-memory sqlite
database that `reset(seed)` rebuilds (shop_data.py, forum_data.py), served by `LoopbackServer` (server.py), with
task templates (tasks_shop.py, tasks_forum.py) that write WebArena-format configs (task.py) for a seeded state.
"""
