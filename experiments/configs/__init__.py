"""Named presets: plain functions returning a TrainConfig. `experiments/train.py` exposes them on the CLI."""

from __future__ import annotations

import dataclasses

from jgem.algos.config import LearnerConfig
from jgem.config import CurriculumConfig, EnvConfig, ModelSpec, TrainConfig, WarmStartConfig
from jgem.rollout.config import RolloutConfig
from jgem.sharding.config import MeshConfig


def tiny() -> TrainConfig:
    """The embedded default: the tiny model and shipped tokenizer learn GuessTheNumber-easy on CPU.

    A supervised warm start imitates the scripted binary-search player (the action format and most of the
    policy); ReBN with gamma 0.9 then raises the success of the sampled policy. RL is fragile at this size: in
    the measured runs, lr 5e-4 (with or without a KL penalty) and GRPO at 2e-4 without one lost success within
    10-20 steps, so RL runs at lr 2e-4, with a fresh AdamW state and a KL penalty to the warm-started policy
    (k2: its gradient is the on-policy gradient of KL(pi || pi_ref)). Evaluation samples from the policy
    (temperature 1) on 128 held-out seeds. Measured (`make demo`, docs/quickstart.md): 0.79 after the warm start,
    0.93 after RL, 12.5 min on 2 cores.
    """
    return TrainConfig(
        run_dir="runs/tiny",
        seed=0,
        steps=60,
        algorithm="rebn",
        gamma=0.9,
        episodes_per_step=32,
        env=EnvConfig(env_id="game:GuessTheNumber-v0-easy", num_envs=32, backend="inline"),
        model=ModelSpec(preset="tiny"),
        rollout=RolloutConfig(view="chat", max_new_tokens=12, max_episode_tokens=512),
        learner=LearnerConfig(
            policy_loss="ppo",
            lr=2e-4,
            max_grad_norm=1.0,
            epochs=2,
            minibatches=2,
            kl_coef=0.1,
            kl_estimator="k2",
        ),
        warm_start=WarmStartConfig(steps=100, episodes_per_step=32, lr=1e-3, epsilon=0.0),
        eval_every=10,
        eval_episodes=128,
        checkpoint_every=10,
    )


def tiny_moe() -> TrainConfig:
    """The demo on a mixture of experts: `tiny`'s run with the `tiny-moe` model and routing replay.

    The model is tiny's shape with every MLP a Qwen3-MoE block (8 experts of width 96, 2 per token, renormalised
    gates). The rollout engine records each token's experts and the learner replays them (`--learner.routing
    replay`, the default; `recompute` lets its router choose again), adding the load-balancing loss
    (`router_aux_loss_coef` 0.001, HF's) and logging `train/aux_loss` and `train/routing_mismatch_frac`. Every other
    setting is the demo's; it runs in every pipeline mode (`--pipeline.mode sync|off_policy|async|stream`).
    """
    return dataclasses.replace(tiny(), run_dir="runs/tiny-moe", model=ModelSpec(preset="tiny-moe"))


def tiny_gamma_1to50() -> TrainConfig:
    """The discount-factor experiment, first design: GuessTheNumber 1-50 in 12 turns, a weak teacher's warm start.

    GEM's study of gamma: with gamma < 1 a success found in fewer turns has a higher return, so RL should teach
    the agent to need fewer turns. The demo cannot show it (its warm start imitates binary search, already the
    fewest turns), so here the warm start imitates the `uniform` teacher, which guesses uniformly among the
    numbers the hints leave possible: it wins 99% of games within 12 turns but needs about 6.0 turns where binary
    search needs 4.9 (1,000 games). RL is the demo's ReBN (lr 2e-4, PPO clipping, KL 0.1 to the warm-started
    policy) with one epoch of 2 minibatches a step and 20 steps, so that 15 runs fit the 2-core box (a step of
    these 6-to-8-turn games costs about 12 s there with two runs at once); gamma is the only thing
    `experiments.ablations.gamma_sweep` varies. Evaluation on 128 held-out seeds after the warm start and after
    the last step.
    """
    base = tiny()
    return dataclasses.replace(
        base,
        run_dir="runs/tiny-gamma-1to50",
        steps=20,
        env=dataclasses.replace(base.env, env_id="game:GuessTheNumber-v0-hard", env_kwargs={"max_turns": 12}),
        rollout=dataclasses.replace(base.rollout, max_episode_tokens=1024),
        learner=dataclasses.replace(base.learner, epochs=1),
        warm_start=dataclasses.replace(base.warm_start, teacher="uniform"),
        eval_every=20,
    )


def tiny_gamma() -> TrainConfig:
    """The discount-factor experiment: GuessTheNumber 1-20 in 8 turns, warm-started on a weak teacher.

    GEM's study of gamma: with gamma < 1 a success found in fewer turns has a higher return, so RL should teach
    the agent to need fewer turns. The demo cannot show it (its warm start imitates binary search, already the
    fewest turns), so here the warm start imitates the `uniform` teacher, which guesses uniformly among the
    numbers the hints leave possible: on 1-20 in 8 turns it wins 97.7% of games in 4.64 turns where binary search
    needs 3.73 (1,000 games). 300 warm steps (the tiny model holds the format over these games: 0.625 held-out
    success on seed 0, where 100 steps on 1-50 in 12 turns gave 0.17-0.23; docs/results.md). RL is the demo's
    ReBN (lr 2e-4, PPO clipping, KL 0.1 to the warm-started policy) with one epoch of 2 minibatches a step and 30
    steps; gamma is the only thing `experiments.ablations.gamma_sweep` varies. Evaluation on 128 held-out seeds
    after the warm start and after the last step. The first design is `tiny-gamma-1to50`.
    """
    base = tiny_gamma_1to50()
    return dataclasses.replace(
        base,
        run_dir="runs/tiny-gamma",
        steps=30,
        env=dataclasses.replace(base.env, env_kwargs={"max_number": 20, "max_turns": 8}),
        warm_start=dataclasses.replace(base.warm_start, steps=300),
        eval_every=30,
    )


def tiny_mastermind() -> TrainConfig:
    """The algorithm comparison's second game: Mastermind-easy (per-turn rewards), from a short warm start.

    GEM's Mastermind-v0-easy as registered: a code of 2 different digits from 1-6, 10 guesses, each guess rewarded
    with the black pegs it adds to the best so far (a solved game sums to 1), a format error -0.1 and the end. The
    warm start imitates the scripted solver (Knuth's minimax, 3.51 turns a game on 300 seeds) for 100 steps, as the
    demo's: the tiny model then wins 0.25 of held-out games in 5.45 turns (seed 0; 300 steps gave 0.92 in 3.5 turns,
    too close to the ceiling for algorithms to differ), so RL has the format and the search to improve. RL is the
    demo's (lr 2e-4, PPO clipping, KL 0.1 to the warm-started policy, gamma 0.9) with one epoch of 2 minibatches and
    20 steps, so that 6 algorithms x 3 seeds fit the 2-core box in an hour (a step of these 5-to-7-turn games costs
    about 9 s there with two runs at once, once compiled). Evaluation on 128 held-out seeds after the warm start and
    after the last step.
    """
    base = tiny()
    return dataclasses.replace(
        base,
        run_dir="runs/tiny-mastermind",
        steps=20,
        env=dataclasses.replace(base.env, env_id="game:Mastermind-v0-easy"),
        rollout=dataclasses.replace(base.rollout, max_episode_tokens=1024),
        learner=dataclasses.replace(base.learner, epochs=1),
        eval_every=20,
    )


def tiny_kuhn_selfplay() -> TrainConfig:
    """Self-play on Kuhn Poker: one shared policy at both seats, RAE, from a warm start on a noisy Nash player.

    The multi-agent result's task (docs/results/preregistered/kuhn-selfplay.md). Kuhn Poker (`multi:KuhnPoker-v0-easy`,
    3 cards, one betting round) in the `agents` workflow: every seat is the policy (`rollout.opponent self`), a group
    of 2 is one hand from both seats, and `rae` (ReBN per role) gives each seat its own baseline. The warm start
    imitates the Nash player at both seats with half its moves random (`epsilon` 0.5: the format and a weak
    policy, so RL has room), 100 steps as the demo's. RL is the demo's (lr 2e-4, PPO clipping, 2 epochs of 2
    minibatches, KL 0.1 to the warm-started policy) for 30 steps of 32 episodes (16 hands). The rules take ~360
    tokens, so a seat that acts twice needs a 1024-token stream. Evaluation: 128 held-out hands against the scripted
    random player, the policy at alternating seats, after the warm start and every 10 steps. A run takes about 11
    minutes on 2 cores.
    """
    base = tiny()
    return dataclasses.replace(
        base,
        run_dir="runs/tiny-kuhn-selfplay",
        steps=30,
        algorithm="rae",
        group_size=2,
        env=dataclasses.replace(base.env, env_id="multi:KuhnPoker-v0-easy"),
        rollout=dataclasses.replace(
            base.rollout, max_episode_tokens=1024, workflow="agents", opponent="self", eval_opponent="random"
        ),
        warm_start=dataclasses.replace(base.warm_start, teacher="nash", epsilon=0.5),
    )


def qwen3_1p7b_games(model_path: str = "/path/to/Qwen3-1.7B-Base", env_id: str = "game:Sudoku-v0-easy") -> TrainConfig:
    """GEM's game recipe: Qwen3-1.7B-Base, ReBN, gamma 0.9, dense per-turn rewards, chat-history view."""
    return TrainConfig(
        run_dir="runs/qwen3-1.7b-games",
        steps=500,
        algorithm="rebn",
        gamma=0.9,
        episodes_per_step=128,
        env=EnvConfig(env_id=env_id, num_envs=128, backend="thread"),
        model=ModelSpec(path=model_path, dtype="bfloat16", param_dtype="float32", remat="full"),  # f32 master weights
        rollout=RolloutConfig(view="chat", max_new_tokens=512, max_episode_tokens=8192, temperature=1.0),
        learner=LearnerConfig(policy_loss="ppo", lr=1e-6, max_grad_norm=1.0, minibatches=4, micro_batch_size=8),
        mesh=MeshConfig(data=1, fsdp=-1, tensor=1),
        eval_every=25,
        eval_episodes=128,
        checkpoint_every=25,
    )


def qwen3_4b_math_python(
    model_path: str = "/path/to/Qwen3-4B-Base", data_path: str = "/path/to/math.jsonl"
) -> TrainConfig:
    """Math with the Python tool (GEM's math + python_tool recipe), ReBN with gamma 1."""
    return TrainConfig(
        run_dir="runs/qwen3-4b-math-python",
        steps=500,
        algorithm="rebn",
        gamma=1.0,
        episodes_per_step=128,
        env=EnvConfig(
            env_id="math:Orz57K",
            env_kwargs={"path": data_path},
            tools=("python",),
            num_envs=128,
            backend="thread",
            step_timeout=30.0,
        ),
        model=ModelSpec(path=model_path, dtype="bfloat16", param_dtype="float32", remat="full"),  # f32 master weights
        rollout=RolloutConfig(view="chat", max_new_tokens=2048, max_episode_tokens=8192),
        learner=LearnerConfig(policy_loss="ppo", lr=1e-6, minibatches=4, micro_batch_size=8),
        mesh=MeshConfig(data=1, fsdp=-1, tensor=1),
        eval_every=25,
    )


def scaling_inter(model_path: str = "/path/to/Qwen3-1.7B-Base") -> TrainConfig:
    """AgentGym-RL's ScalingInter-RL on BabyAI: the turn horizon grows 5 -> 10 -> 20."""
    base = qwen3_1p7b_games(model_path, env_id="agentgym:BabyAI-v0")
    return dataclasses.replace(
        base,
        run_dir="runs/scaling-inter",
        algorithm="grpo",
        group_size=8,
        curriculum=CurriculumConfig(horizons=(5, 10, 20), stage_steps=100),
    )


PRESETS = {
    "tiny": (tiny.__doc__.splitlines()[0], tiny()),
    "tiny-gamma": (tiny_gamma.__doc__.splitlines()[0], tiny_gamma()),
    "tiny-gamma-1to50": (tiny_gamma_1to50.__doc__.splitlines()[0], tiny_gamma_1to50()),
    "tiny-mastermind": (tiny_mastermind.__doc__.splitlines()[0], tiny_mastermind()),
    "tiny-kuhn-selfplay": (tiny_kuhn_selfplay.__doc__.splitlines()[0], tiny_kuhn_selfplay()),
    "qwen3-1.7b-games": (qwen3_1p7b_games.__doc__.splitlines()[0], qwen3_1p7b_games()),
    "qwen3-4b-math-python": (qwen3_4b_math_python.__doc__.splitlines()[0], qwen3_4b_math_python()),
    "scaling-inter": (scaling_inter.__doc__.splitlines()[0], scaling_inter()),
    "tiny-moe": (tiny_moe.__doc__.splitlines()[0], tiny_moe()),
}
