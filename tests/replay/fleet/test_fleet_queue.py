"""The fleet's work queue: which pair a worker with a free slot is given next (log affinity)."""

from __future__ import annotations

from hipmem.replay.fleet.queue import WorkQueue


def pairs(logs: int, specs: int) -> list[tuple[int, int]]:
    return [(log, spec) for log in range(logs) for spec in range(specs)]


def by_log(items: list[tuple[int, int]]) -> WorkQueue[tuple[int, int]]:
    return WorkQueue(items, log_of=lambda pair: pair[0])


def test_each_worker_keeps_to_its_own_log_then_starts_a_new_one():
    queue = by_log(pairs(4, 3))
    assert len(queue) == 12
    assert [queue.take("a"), queue.take("b"), queue.take("a"), queue.take("b")] == [
        (0, 0), (1, 0), (0, 1), (1, 1),
    ]  # fmt: skip
    assert queue.take("a") == (0, 2)
    assert queue.take("a") == (2, 0)  # log 0 is done: a log nobody has started
    assert queue.take("b") == (1, 2)
    assert queue.take("b") == (3, 0)
    assert queue.take("a") == (2, 1) and queue.take("b") == (3, 1)
    assert len(queue) == 2


def test_at_the_end_an_idle_worker_steals_from_the_log_with_most_pairs_left():
    queue = by_log(pairs(2, 4))
    assert [queue.take("a") for _ in range(3)] == [(0, 0), (0, 1), (0, 2)]
    assert queue.take("b") == (1, 0)
    assert queue.take("a") == (0, 3)
    # a's log is done and every log is started: b's log, which has three pairs left.
    assert queue.take("a") == (1, 1)
    assert queue.take("b") == (1, 2)  # b stays on its log, now shared
    assert queue.take("a") == (1, 3)
    assert queue.take("a") is None and queue.take("b") is None and len(queue) == 0


def test_a_task_for_whoever_is_free_leaves_its_log_to_be_stolen():
    queue = by_log(pairs(3, 2))
    assert queue.take("a") == (0, 0)
    assert queue.take(None) == (1, 0)  # no worker known just now: a log nobody has started
    assert queue.take("a") == (0, 1)
    assert queue.take("b") == (2, 0)
    assert queue.take("b") == (2, 1)
    assert queue.take("b") == (1, 1)  # log 1 is nobody's: stolen once the others are done
    assert queue.take("a") is None


def test_one_item_per_log_is_first_in_first_out():
    queue = WorkQueue(range(5), log_of=lambda i: i)
    assert [queue.take(w) for w in "abab"] + [queue.take(None), queue.take("a")] == [
        0, 1, 2, 3, 4, None,
    ]  # fmt: skip
