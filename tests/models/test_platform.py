import jax
import pytest

from jgem.models.platform import platform, target_platform


def test_platform_defaults_to_the_backend_and_nests():
    assert platform() == jax.default_backend()
    with target_platform("tpu"):
        assert platform() == "tpu"
        with target_platform("gpu"):
            assert platform() == "gpu"
        assert platform() == "tpu"
    assert platform() == jax.default_backend()


def test_platform_refuses_unknown_names():
    with pytest.raises(ValueError, match="'tpuv5'"), target_platform("tpuv5"):
        pass
