"""The sign-in throttle on its own, on a hand-driven clock: budgets, lockouts, expiry, memory."""

from __future__ import annotations

import pytest

from studio.login_throttle import MAX_ADDRESSES, LoginThrottle

WINDOW = 320.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _throttle(clock: Clock, *, per_address: int = 3, overall: int = 50) -> LoginThrottle:
    return LoginThrottle(
        address_failures=per_address, global_failures=overall, window_seconds=WINDOW, clock=clock
    )


def test_login_throttle_locks_an_address_out_after_its_budget_and_not_its_neighbour() -> None:
    clock = Clock()
    throttle = _throttle(clock)
    for _ in range(2):
        assert throttle.refusal("10.0.0.1") is None
        throttle.failed("10.0.0.1")
    assert throttle.refusal("10.0.0.1") is None
    throttle.failed("10.0.0.1")
    refusal = throttle.refusal("10.0.0.1")
    assert refusal is not None
    assert refusal.retry_after_seconds == WINDOW / 16
    assert "this address" in refusal.reason
    assert throttle.refusal("10.0.0.2") is None


def test_login_throttle_lockouts_expire_doubling_up_to_the_window() -> None:
    clock = Clock()
    throttle = _throttle(clock)
    for _ in range(3):
        throttle.failed("a")
    lockouts = []
    for _ in range(8):
        refusal = throttle.refusal("a")
        assert refusal is not None
        lockouts.append(refusal.retry_after_seconds)
        clock.now += refusal.retry_after_seconds
        assert throttle.refusal("a") is None  # every lockout ends by itself
        throttle.failed("a")
    assert lockouts == [20, 40, 80, 160, 320, 320, 320, 320]


def test_login_throttle_right_password_clears_the_count_and_quiet_forgets_it() -> None:
    clock = Clock()
    throttle = _throttle(clock)
    throttle.failed("a")
    throttle.failed("a")
    throttle.succeeded("a")
    throttle.failed("a")
    throttle.failed("a")
    assert throttle.refusal("a") is None
    clock.now += WINDOW + 1
    throttle.failed("b")  # the next failure anywhere drops addresses quiet for a window
    assert throttle.addresses_remembered == 1
    throttle.failed("a")
    assert throttle.refusal("a") is None


def test_login_throttle_global_budget_stops_a_rotation_but_not_known_addresses() -> None:
    clock = Clock()
    throttle = _throttle(clock, overall=50)
    throttle.succeeded("192.0.2.7")  # the operator signed in from here before
    tried = 0
    for number in range(1000):
        address = f"10.1.{number // 250}.{number % 250}"
        if throttle.refusal(address) is not None:
            break
        throttle.failed(address)
        tried += 1
    assert tried == 50
    refusal = throttle.refusal("10.9.9.9")
    assert refusal is not None and "everywhere" in refusal.reason
    assert refusal.retry_after_seconds == WINDOW
    assert throttle.refusal("192.0.2.7") is None
    clock.now += WINDOW
    assert throttle.refusal("10.9.9.9") is None  # the global lockout expires too


@pytest.mark.parametrize("rotations", [MAX_ADDRESSES * 3])
def test_login_throttle_memory_stays_bounded_under_rotating_addresses(rotations: int) -> None:
    clock = Clock()
    throttle = _throttle(clock, overall=rotations * 2)
    for number in range(rotations):
        throttle.failed(f"addr-{number}")
        throttle.succeeded(f"known-{number}")
    assert throttle.addresses_remembered == MAX_ADDRESSES
