"""Memory and threads: C allocations are released, returned arrays own
their memory, the GIL is released while the library computes, and calls
from several threads on one model take turns."""
import os
import threading
import time

import numpy as np

import ds4ref
from ds4ref import _lib
from conftest import TINY, VECTORS


def rss() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_thousand_sessions_leave_rss_flat(model):
    golden = VECTORS / "tiny-ds4-qaton-capital.jsonl"
    # Each iteration allocates about 1.5 MiB in C: a session's state (about
    # 1 MiB even with ctx=1), a dequantized tensor (512 KiB), now and then
    # logits, a golden (140 KiB) or a model.  Leaking any one kind grows RSS
    # over the loop by 13 MiB (the goldens) to 1.5 GiB (the sessions); a
    # loop that frees everything moves it by about 100 KiB.
    for i in range(1000):
        if i == 100:
            base = rss()   # after the allocator has warmed up
        s = model.session(ctx=1)
        if i % 10 == 0:
            s.eval([i % model.info.n_vocab])
            s.top_logprobs(0, 4)
        if i % 2:
            s.close()      # the others go when their last reference does
        model.tensor("output.weight")
        if i % 10 == 0:
            ds4ref.read_golden(golden)
        if i % 100 == 0:
            m = ds4ref.Model(TINY)
            m.session()    # dropped at once
            if i % 200:
                m.close()
            del m          # the other half goes with its last reference
    growth = rss() - base
    assert growth < 4 << 20, f"RSS grew by {growth >> 10} KiB"


def test_returned_arrays_are_copies_that_outlive_the_model():
    m = ds4ref.Model(TINY)
    ids = m.chat("hi")
    with m.session() as s:
        logits = s.eval(ids)
        top = s.top_logprobs(0, 3)
    taps = m.taps(ids, names=["hc_ffn", "indexer_sel"])
    weight = m.tensor("output.weight")
    gen = m.generate(ids, 3)
    saved = [a.copy() for a in (logits, top, weight, gen.tokens, gen.top, taps["hc_ffn"][0])]
    m.close()
    golden = ds4ref.read_golden(VECTORS / "tiny-ds4-qaton-capital.jsonl")
    arrays = (logits, top, weight, gen.tokens, gen.top, taps["hc_ffn"][0], golden.top,
              golden.prompt, golden.logits, ids)
    for a in arrays:
        # Owned by NumPy, or a view of a NumPy array that is: no array
        # borrows memory the library could free.
        base = a
        while base.base is not None:
            base = base.base
            assert isinstance(base, np.ndarray), type(base)
        assert a.flags.writeable
    for a, b in zip(arrays, saved):
        assert a.tobytes() == b.tobytes()


def test_the_gil_is_released_while_the_library_computes():
    # A Python thread counts while another evaluates.  If the GIL were held
    # during the C call the counter could hardly move (one switch interval,
    # 5 ms: about 2% of its pace while the evaluating thread sleeps);
    # released, it keeps about half that pace even on a busy 2-core machine.
    count, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    with ds4ref.Model(TINY, threads=1) as m, m.session() as s:
        ids = np.arange(128) % m.info.n_vocab
        spinner = threading.Thread(target=spin)
        spinner.start()
        try:
            c0, t0 = count[0], time.perf_counter()
            s.eval(ids, logits=False)
            during, elapsed = count[0] - c0, time.perf_counter() - t0
            c0 = count[0]
            time.sleep(elapsed)
            sleeping = count[0] - c0
        finally:
            stop.set()
            spinner.join()
    assert elapsed > 0.05, "the evaluation was too short to tell"
    assert during > 0.1 * sleeping, (during, sleeping, elapsed)


def test_each_model_runs_with_its_own_thread_count():
    # OpenMP keeps the thread count per calling thread, and ds4ref sizes
    # per-thread scratch with the count of an earlier call: a model used
    # after another one lowered the count in the same thread must get its
    # own back (or a later call with more threads overruns the scratch).
    omp = _lib.lib().omp_get_max_threads
    with ds4ref.Model(TINY, threads=1) as one, ds4ref.Model(TINY) as default:
        assert default.threads == _lib.default_threads >= 1
        for m in (one, default, one):
            with m.session() as s:
                s.eval([1, 2, 3])
            assert omp() == m.threads


def test_threads_sharing_a_model_take_turns(model):
    # Sessions, taps and generation from four threads at once on one model
    # (the library forbids concurrent calls; the package serializes them)
    # give what they give alone.
    ids = model.chat("Count to ten")
    with model.session() as s:
        ref_logits = s.eval(ids)
    ref_taps = model.taps(ids, names=["experts"])["experts"]
    ref_gen = model.generate(ids, 8).tokens
    results, errors = [], []

    def work():
        try:
            for _ in range(2):
                with model.session() as s:
                    results.append(s.eval(ids).tobytes() == ref_logits.tobytes())
                t = model.taps(ids, names=["experts"])["experts"]
                results.append(all(np.array_equal(t[k], ref_taps[k]) for k in ref_taps))
                results.append(model.generate(ids, 8).tokens.tolist() == ref_gen.tolist())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 24 and all(results)
