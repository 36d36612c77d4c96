"""The client-side token bucket (``kvdev.host.ratelimit``) with an injected clock: no sleeps,
the waits are counted and the clock moves only when the bucket sleeps."""

import threading

import pytest

from kvdev.host.cli import main
from kvdev.host.ratelimit import DEFAULT_BURST, DEFAULT_QPS, TokenBucket


class Clock:
    """A clock that moves only when something sleeps on it (or ``advance``)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def advance(self, seconds: float) -> None:
        self.now += seconds


def bucket(qps: float, burst: int) -> tuple[TokenBucket, Clock]:
    clock = Clock()
    return TokenBucket(qps, burst, clock=clock, sleep=clock.sleep), clock


def test_the_defaults_are_client_gos():
    assert (DEFAULT_QPS, DEFAULT_BURST) == (5.0, 10)


def test_a_full_bucket_lets_burst_requests_through_then_one_every_1_over_qps():
    limiter, clock = bucket(qps=4, burst=3)
    delays = [limiter.wait() for _ in range(7)]
    assert delays == [0, 0, 0, 0.25, 0.25, 0.25, 0.25]
    assert limiter.waits == 4
    assert clock.slept == [0.25] * 4
    assert clock.now == pytest.approx(101.0)


def test_an_idle_bucket_refills_at_qps_but_never_beyond_burst():
    limiter, clock = bucket(qps=2, burst=2)
    assert [limiter.wait(), limiter.wait()] == [0, 0]
    clock.advance(0.5)  # one token back
    assert limiter.wait() == 0
    assert limiter.wait() == pytest.approx(0.5)
    clock.advance(3600)  # an hour idle: still only `burst` tokens
    assert [limiter.wait() for _ in range(3)] == [0, 0, pytest.approx(0.5)]


def test_callers_that_find_it_empty_queue_behind_each_other():
    """A reservation holds its token: the second caller waits twice as long, none starves."""
    limiter, _ = bucket(qps=10, burst=1)
    assert limiter.reserve() == 0
    assert [limiter.reserve() for _ in range(3)] == [
        pytest.approx(0.1),
        pytest.approx(0.2),
        pytest.approx(0.3),
    ]
    assert limiter.waited == pytest.approx(0.6)


def test_threads_share_one_bucket_and_take_exactly_one_token_each():
    limiter, _ = bucket(qps=1, burst=5)
    delays: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(10):
            d = limiter.reserve()
            with lock:
                delays.append(d)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(delays) == [0.0] * 5 + [float(n) for n in range(1, 36)]


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_a_bucket_that_could_never_send_is_refused(qps, burst):
    with pytest.raises(ValueError, match=r"qps|burst"):
        TokenBucket(qps, burst)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--kube-api-qps=0"], "--kube-api-qps: 0 would never send a request"),
        (["--kube-api-burst=0"], "--kube-api-burst: must be at least 1"),
    ],
)
def test_the_command_line_names_the_flag_it_refuses(flags, said, tmp_path, capsys):
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\n")
    status = main(["controller", "--kubeconfig", str(config), *flags])
    assert status == 2
    assert said in capsys.readouterr().err
