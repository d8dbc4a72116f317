"""The shipped workflows (`jgem.rollout.workflow`), registered on import: `turns` (the default: observation ->
action -> observation, in the config's view), `compact` (an agent that summarises its context into a new segment
when the stream passes a budget), `tree` (each group forks from one episode's state at a turn) and `agents`
(multi-agent games: a stream and an episode per seat the policy plays, self-play or against a scripted player)."""

from jgem.rollout.workflow import WORKFLOWS, Workflow

# registration order is the order errors list them: the default first
# isort: off
from jgem.rollout.workflows import turns, compact, tree, agents  # noqa: F401
# isort: on


def get_workflow(name: str) -> Workflow:
    """The workflow registered as `name`: a shipped one or one a module given with `--import` registered."""
    return WORKFLOWS.get(name)


def workflow_errors(cfg, name=str) -> list[str]:
    """A config's check of its workflow: the name registered, and what the workflow says of the rollout config
    (`Workflow.check`), each message naming the field as `name(field)`."""
    errors = WORKFLOWS.name_errors(cfg.workflow, name("workflow"))
    if errors:
        return errors
    return [f"{name('workflow')} {cfg.workflow}: {e}" for e in WORKFLOWS.get(cfg.workflow).check(cfg)]
