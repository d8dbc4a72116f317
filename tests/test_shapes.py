"""`jgem.shapes.bucket`: the padded sizes the update's rows and the engine's slot buckets take."""

import pytest

from jgem.shapes import bucket, next_pow2


@pytest.mark.parametrize("per_doubling", [1, 2, 4, 8])
def test_bucket_has_per_doubling_sizes_between_powers_of_two_and_bounded_padding(per_doubling):
    sizes = sorted({bucket(n, per_doubling) for n in range(1, 4097)})
    for lo in (64, 256, 1024, 2048):  # the sizes in (lo, 2 lo]: evenly spaced, `per_doubling` of them
        inside = [s for s in sizes if lo < s <= 2 * lo]
        step = lo // per_doubling
        assert inside == list(range(lo + step, 2 * lo + 1, step)), (lo, inside)
    for n in range(1, 4097):
        b = bucket(n, per_doubling)
        assert n <= b <= next_pow2(n) and bucket(b, per_doubling) == b
        assert (b - n) / b < 1 / (1 + per_doubling) + 1e-9 or b - n < per_doubling, (n, b)


def test_one_size_per_doubling_is_the_next_power_of_two_and_four_is_the_slot_buckets():
    assert [bucket(n) for n in (1, 3, 5, 17, 33, 1000)] == [next_pow2(n) for n in (1, 3, 5, 17, 33, 1000)]
    assert [bucket(n, 4) for n in (9, 17, 21, 33, 43, 65)] == [10, 20, 24, 40, 48, 80]
