import os
import stat


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_modes():
    assert mode("/app/keys") == 0o755
    assert mode("/app/keys/private") == 0o700
    assert mode("/app/keys/private/id.key") == 0o600
    assert mode("/app/keys/public.txt") == 0o644
