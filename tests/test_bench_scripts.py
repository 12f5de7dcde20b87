"""The scripts in ``benches/`` are no tests, but they must keep running: each answers
``--help``, and each one that dispatches on a library knows every library the others list.
(The figures themselves come from running the scripts, never from here.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parent.parent / "benches"
# The scripts, not the modules they share (text_files.py, fresh_process.py, ...).
SCRIPTS = sorted(p.name for p in BENCHES.glob("*.py") if 'if __name__ == "__main__":' in p.read_text(encoding="utf-8"))


def test_the_bench_scripts_are_found():
    assert {"encode_compare.py", "load_compare.py", "train_compare.py"} <= set(SCRIPTS)
    assert "text_files.py" not in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_bench_script_answers_help(script: str) -> None:
    done = subprocess.run([sys.executable, str(BENCHES / script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_load_compare_has_a_loader_for_every_library_it_offers(tmp_path: Path) -> None:
    # In a child process: some loaders set environment variables for the worker they run in.
    vocab = tmp_path / "vocab.tiktoken"
    vocab.write_text("")
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(BENCHES)!r})
        import load_compare
        spec = {{"vocab_file": {str(vocab)!r}, "tmp": {str(tmp_path)!r}, "specials": {{}}}}
        for lib in load_compare.RUN_ORDER:
            load, build = load_compare._loader(lib, "cl100k_base", spec)
            assert callable(load) and callable(build), lib
        print(len(load_compare.RUN_ORDER))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 2


def test_one_thread_runs_are_pinned_to_one_cpu_and_batches_never(tmp_path: Path) -> None:
    # In a child process: pinning is for the whole process.
    code = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(BENCHES)!r})
        import encode_compare as ec
        from cpu_pinning import one_cpu, pin
        allowed = sorted(os.sched_getaffinity(0))
        cpu = one_cpu()
        assert one_cpu(False) is None
        assert cpu == (allowed[-1] if len(allowed) > 1 else None), (cpu, allowed)
        # What the runner hands each worker: a CPU for one-thread modes, none for batches.
        seen = []
        ec.run_worker = lambda spec, env, timeout: (seen.append(spec) or None, "boom")
        runner = ec.Runner({{}}, 1, 1.0, {str(tmp_path)!r}, 2, cpu=7)
        for mode in ("single", "batch", "numpy", "worst"):
            runner._run_once({{"lib": "tokenmill", "encoding": "cl100k_base", "mode": mode, "bytes": 1}}, mode)
        assert [s["cpu"] for s in seen] == [7, None, 7, 7], seen
        pin(cpu)
        assert sorted(os.sched_getaffinity(0)) == ([cpu] if cpu is not None else allowed)
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def _callgrind_counts():
    sys.path.insert(0, str(BENCHES))
    try:
        import callgrind_counts
    finally:
        sys.path.remove(str(BENCHES))
    return callgrind_counts


def test_callgrind_counts_reads_the_totals_and_sums_the_figures(tmp_path: Path) -> None:
    cc = _callgrind_counts()
    out = tmp_path / "run.callgrind"
    out.write_text(
        "version: 1\ncreator: callgrind\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim\n"
        "fn=(1) f\n0 5 1 1 0 1 0 0 1 0 2 1 0 0\nsummary: 100 40 20 3 7 5 2 6 4 30 9 10 1\n"
        "totals: 100 40 20 3 7 5 2 6 4 30 9 10 1\n"
    )
    counts = cc.totals(out)
    assert counts["Ir"] == 100 and counts["Bcm"] == 9 and counts["DLmw"] == 4
    assert cc.summary(counts) == {"instructions": 100, "mispredicted": 10, "L1 data misses": 12, "last-level misses": 12}
    empty = tmp_path / "empty.callgrind"
    empty.write_text("version: 1\nevents: Ir\n")
    with pytest.raises(ValueError, match="no totals"):
        cc.totals(empty)
    with pytest.raises(ValueError):
        cc.command(out, [], ["true"])
    cmd = cc.command(out, ["*f*", "*g*"], ["prog", "arg"])
    assert cmd[0] == "valgrind" and cmd[-2:] == ["prog", "arg"]
    assert "--toggle-collect=*f*" in cmd and "--toggle-collect=*g*" in cmd
    assert f"--callgrind-out-file={out}" in cmd and all(c in cmd for c in cc.CACHE_MODEL)


def test_callgrind_counts_of_the_same_work_are_the_same_and_only_inside_the_function(tmp_path: Path) -> None:
    cc = _callgrind_counts()
    if not cc.available():
        pytest.skip("valgrind is not installed: counting cannot be checked here")
    script = tmp_path / "work.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from tokenmill._core import CoreBPE
            core = CoreBPE({bytes([i]): i for i in range(256)} | {b"ab": 256, b"abc": 257}, {}, r"\\S+|\\s+")
            for i in range(int(sys.argv[1])):
                core.encode_ordinary(f"abc ab abd {i} " * 20)
            """
        )
    )
    figures = []
    for n, calls in enumerate((30, 30, 60)):
        out = tmp_path / f"{n}.callgrind"
        done = subprocess.run(
            cc.command(out, ["*__pymethod_encode_ordinary__"], [sys.executable, str(script), str(calls)]),
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        figures.append(cc.summary(cc.totals(out))["instructions"])
    # The same calls count the same to within one instruction in ten thousand (runs
    # differ by a few in a hundred thousand: the interpreter's own work inside a call
    # varies a little), and twice the calls about twice as much: nothing outside the
    # calls (start-up, imports) is counted.
    assert figures[0] > 0 and abs(figures[0] - figures[1]) <= figures[0] // 10_000, figures
    assert 1.9 < figures[2] / figures[0] < 2.1, figures


def test_kinds_with_little_text_are_marked_in_the_table_by_kind() -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(BENCHES)!r})
        import encode_compare as ec
        texts = {{"long": [("python", "a", "x" * 200_000), ("go", "b", "y" * 8_000)]}}
        single = {{("tokenmill", "long"): {{"doc_seconds": [0.001, 0.0001]}},
                   ("gigatoken", "long"): {{"doc_seconds": [0.002, 0.0002]}}}}
        ec.print_kinds(["tokenmill", "gigatoken"], single, texts)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.startswith("  ") and "%" in line}
    assert "too little text" in rows["Go"] and "8 kB" in rows["Go"]
    assert "too little text" not in rows["Python"]
    assert rows["Python"].split()[-2] == "2.00"  # x: tokenmill's 200 MB/s over 100


@pytest.mark.skipif(sys.platform == "win32", reason="getrusage is POSIX")
def test_the_fault_table_counts_the_faults_of_new_memory_and_prices_them() -> None:
    code = textwrap.dedent(
        f"""
        import mmap, sys
        sys.path.insert(0, {str(BENCHES)!r})
        import encode_compare as ec
        before = ec.page_faults()
        m = mmap.mmap(-1, 400 * mmap.PAGESIZE)
        for at in range(0, 400 * mmap.PAGESIZE, mmap.PAGESIZE):
            m[at] = 1
        print("faults", ec.page_faults() - before, "price", ec.fault_microseconds(pages=256, rounds=3))
        single = {{
            ("tokenmill", "short"): {{"seconds": 0.5, "page_faults": 12_300}},
            ("tokenmill", "long"): {{"seconds": 2.0}},
            ("tiktoken", "short"): {{"seconds": 4.0, "page_faults": 45_600}},
            ("gigatoken", "short"): {{"seconds": 1.0}},
        }}
        ec.print_faults(["tokenmill", "tiktoken", "gigatoken"], single, {{"short": 1, "long": 1}}, 2.0)
        ec.print_faults(["tokenmill"], single, {{"short": 1}}, None)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    first = lines[0].split()
    # Writing to 400 new pages takes about 400 faults (a few more for the interpreter),
    # and a fault costs something.
    assert 400 <= int(first[1]) < 600 and float(first[3]) > 0, lines[0]
    assert "2.00 µs a fault" in lines[1], lines[1]
    rows = [line.split() for line in lines if line.startswith("  ") and not line.strip().startswith("-") and "faults" not in line]
    # Thousands of faults, their cost at 2 µs each (ms), and its share of the pass.
    assert rows[0] == ["tokenmill", "12.3", "25", "5%", "-", "-", "-"], rows
    assert rows[1] == ["tiktoken", "45.6", "91", "2%", "-", "-", "-"], rows
    assert len(rows) == 3 and rows[2] == ["tokenmill", "12.3", "-", "-"], rows  # no price: count only
    assert not any(r[0] == "gigatoken" for r in rows)  # no figures: no row
