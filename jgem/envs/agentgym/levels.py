"""AgentGym's BabyAI level list (1-based, as its data indices use it); GoToObjS6 is -v1 in minigrid 3.x.

A separate module so registering the ids does not import minigrid.
"""

BABYAI_LEVELS: tuple[str, ...] = (
    "GoToRedBallGrey-v0", "GoToRedBall-v0", "GoToRedBallNoDists-v0", "GoToObjS6-v1", "GoToLocalS8N7-v0",
    "GoToObjMazeS7-v0", "GoToImpUnlock-v0", "GoToSeqS5R2-v0", "GoToRedBlueBall-v0", "GoToDoor-v0",
    "GoToObjDoor-v0", "Open-v0", "OpenRedDoor-v0", "OpenDoorLoc-v0", "OpenRedBlueDoorsDebug-v0",
    "OpenDoorsOrderN4Debug-v0", "Pickup-v0", "UnblockPickup-v0", "PickupLoc-v0", "PickupDistDebug-v0",
    "PickupAbove-v0", "PutNextLocalS6N4-v0", "PutNextS7N4Carrying-v0", "Unlock-v0", "UnlockLocalDist-v0",
    "KeyInBox-v0", "UnlockPickupDist-v0", "BlockedUnlockPickup-v0", "UnlockToUnlock-v0", "ActionObjDoor-v0",
    "FindObjS7-v0", "KeyCorridorS6R3-v0", "OneRoomS20-v0", "MoveTwoAcrossS8N9-v0", "SynthS5R2-v0",
    "SynthLoc-v0", "SynthSeq-v0", "MiniBossLevel-v0", "BossLevel-v0", "BossLevelNoUnlock-v0",
)

# ScienceWorld 1.2's 30 task names (as `ScienceWorldEnv.get_task_names()` lists them), so ids register without a JVM.
SCIWORLD_TASKS: tuple[str, ...] = (
    "boil", "change-the-state-of-matter-of", "chemistry-mix", "chemistry-mix-paint-secondary-color",
    "chemistry-mix-paint-tertiary-color", "find-animal", "find-living-thing", "find-non-living-thing", "find-plant",
    "freeze", "grow-fruit", "grow-plant", "identify-life-stages-1", "identify-life-stages-2",
    "inclined-plane-determine-angle", "inclined-plane-friction-named-surfaces",
    "inclined-plane-friction-unnamed-surfaces", "lifespan-longest-lived", "lifespan-longest-lived-then-shortest-lived",
    "lifespan-shortest-lived", "measure-melting-point-known-substance", "measure-melting-point-unknown-substance",
    "melt", "mendelian-genetics-known-plant", "mendelian-genetics-unknown-plant", "power-component",
    "power-component-renewable-vs-nonrenewable-energy", "test-conductivity", "test-conductivity-of-unknown-substances",
    "use-thermometer",
)
