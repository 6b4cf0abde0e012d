"""The compute queue: one heavy job at a time, first come first served, and an honest place in line."""
import contextvars
import threading
import time

from longviz_core.runtime import BudgetLRU, ComputeQueue, waiting_notice


def test_queue_runs_jobs_one_at_a_time_in_arrival_order_and_reports_the_line():
    queue = ComputeQueue()
    order, seen, running = [], {}, []
    first_in = threading.Event()
    release = threading.Event()

    def job(name, hold_open=False):
        reports = seen.setdefault(name, [])
        with waiting_notice(reports.append), queue.hold(poll_s=0.01):
            running.append(name)
            assert len(running) == 1, running  # nobody else inside
            order.append(name)
            if hold_open:
                first_in.set()
                release.wait(5)
            running.remove(name)

    first = threading.Thread(target=job, args=("a", True))
    first.start()
    first_in.wait(5)
    later = []
    for name in ("b", "c"):
        t = threading.Thread(target=job, args=(name,))
        t.start()
        later.append(t)
        while queue.waiting() < len(later):  # "b" queues before "c"
            time.sleep(0.005)
    release.set()
    for t in [first, *later]:
        t.join(5)
    assert order == ["a", "b", "c"]
    assert seen["a"] == []  # never waited, never told
    assert seen["b"][0] == 1 and seen["b"][-1] == 0  # one ahead, then its turn
    # "c" may or may not wake while one job is still ahead of it; its place only ever goes down
    assert seen["c"][0] == 2 and seen["c"][-1] == 0 and seen["c"] == sorted(seen["c"], reverse=True)
    assert seen["b"].count(0) == 1 and seen["c"].count(0) == 1
    assert queue.waiting() == 0


def test_queue_is_reentrant_for_the_job_that_holds_it():
    queue = ComputeQueue()
    with queue.hold():
        with queue.hold():  # an analysis inside an attribution job must not deadlock
            assert queue.waiting() == 0
    done = []
    t = threading.Thread(target=lambda: queue.hold().__enter__() or done.append(1))
    t.start()
    t.join(2)
    assert done == [1]  # released fully after the nested exit


def test_budget_lru_evicts_by_bytes_and_computes_each_key_once():
    lru = BudgetLRU(max_bytes=10)
    calls = []

    def make(key, size):
        return lambda: calls.append(key) or (key, size)

    size_of = lambda value: value[1]  # noqa: E731
    lru.get_or_compute("x", make("x", 4), size_of)
    lru.get_or_compute("y", make("y", 4), size_of)
    lru.get_or_compute("x", make("x", 4), size_of)  # served from memory, now most recent
    lru.get_or_compute("z", make("z", 4), size_of)  # 12 bytes > 10: evicts the least recent, "y"
    assert calls == ["x", "y", "z"] and len(lru) == 2
    lru.get_or_compute("y", make("y", 4), size_of)
    assert calls[-1] == "y" and lru.computed == 4


def test_waiting_notice_reaches_hold_in_its_context_only():
    queue = ComputeQueue()
    inside, outside = [], []
    entered, release = threading.Event(), threading.Event()

    def first():
        with queue.hold(poll_s=0.01):
            entered.set()
            release.wait(5)

    def waiter():
        with queue.hold(poll_s=0.01):
            pass

    holder = threading.Thread(target=first)
    holder.start()
    entered.wait(5)
    with waiting_notice(inside.append):  # a worker started here carries the notice only via copy_context
        carried = threading.Thread(target=contextvars.copy_context().run, args=(waiter,))
    with waiting_notice(outside.append):
        bare = threading.Thread(target=waiter)  # a plain thread starts from an empty context
    carried.start()
    while queue.waiting() < 1:
        time.sleep(0.005)
    bare.start()
    while queue.waiting() < 2:
        time.sleep(0.005)
    release.set()
    for t in (holder, carried, bare):
        t.join(5)
    assert inside[0] == 1 and inside[-1] == 0  # one job ahead, then its turn
    assert outside == []
