"""MeshConfig: the device mesh's axis sizes (data, fsdp, tensor); plain data, light to import."""

from __future__ import annotations

import math
from dataclasses import dataclass

AXES = ("data", "fsdp", "tensor")


@dataclass(frozen=True)
class MeshConfig:
    """Mesh axis sizes; one axis may be -1 to take the devices the others leave."""

    data: int = 1
    fsdp: int = 1
    tensor: int = 1

    def resolve(self, num_devices: int) -> tuple[int, int, int]:
        """Axis sizes for `num_devices` devices, or a ValueError saying which sizes would work."""
        sizes = [self.data, self.fsdp, self.tensor]
        fill = [i for i, s in enumerate(sizes) if s == -1]
        bad = [(a, s) for a, s in zip(AXES, sizes) if s == 0 or s < -1]
        if bad:
            raise ValueError(f"mesh axis {bad[0][0]} has size {bad[0][1]}; use a positive size or -1 (fill)")
        if len(fill) > 1:
            raise ValueError(f"only one mesh axis may be -1, got {[AXES[i] for i in fill]}; give the others sizes")
        fixed = math.prod(s for s in sizes if s != -1)
        if fill:
            if num_devices % fixed:
                raise ValueError(
                    f"mesh {dict(zip(AXES, sizes))}: {num_devices} devices are not divisible by the fixed axes' "
                    f"product {fixed}; make the fixed axes multiply to a divisor of {num_devices}"
                )
            sizes[fill[0]] = num_devices // fixed
        elif fixed != num_devices:
            raise ValueError(
                f"mesh {dict(zip(AXES, sizes))} needs {fixed} devices but {num_devices} are available; "
                f"make data*fsdp*tensor = {num_devices} or set one axis to -1"
            )
        return tuple(sizes)
