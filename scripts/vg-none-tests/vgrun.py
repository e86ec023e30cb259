#!/usr/bin/env python3
"""Run Valgrind's none/tests programs natively and under `rgrind --tool=none`.

Purpose: for each `.vgtest` file in the chosen folders of a built Valgrind source tree, run
the program natively twice (to see whether its output is stable) and once under rgrind, and
compare stdout and exit status. `run.sh` prepares the tree and calls this helper.

Invariants:
- Every program runs in its own test folder through `/bin/sh -c 'exec ...'` (as Valgrind's
  vg_regtest does, with `exec` so that a signal is seen as one), stdin from /dev/null,
  stdout and stderr to files, in its own process group, killed with the whole group when
  the timeout runs out.
- Native and rgrind runs get exactly the same command line and environment; stdout is
  compared raw, or through the test's `stdout_filter:` only when the raw native output varies
  between the two native runs and the filtered output does not. The rgrind run only puts
  `RGRIND --tool=none -q [options rgrind knows]` in front of the program; Valgrind options
  that do not change the program's behaviour (--sanity-level, --track-fds, ...) are dropped,
  and tests of Valgrind's own options (--help, --version, ...) are skipped.
- One result line per test, in name order: PASS, FAIL, UNSTABLE (the two native runs differ,
  or a native run timed out) or SKIP (with the reason); then `N passed, N failed`.

What it deliberately does not do: compare stderr (Valgrind's own messages are on stderr, and
the `.stderr.exp` files describe Valgrind, not the program), run `post:` checks, or build
anything.
"""

import argparse
import concurrent.futures
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

# Valgrind options that rgrind understands and that change what the program does.
PASS_OPTS = ("--trace-children=",)
# Options whose whole point is Valgrind's own output: the test says nothing about the program.
SKIP_OPTS = ("--version", "--help", "--help-debug", "--bad-bad-option")
# Prerequisites or cleanups with side effects on shared files: such tests run one at a time.
SIDE_EFFECTS = re.compile(r"\b(cp|rm|touch|mkdir|ln|chmod|allexec_prepare_prereq)\b")
SIGNAL_FUNCS = {"signal", "sigaction", "__sysv_signal", "bsd_signal", "sigset", "sigvec"}
THREAD_FUNCS = {"pthread_create"}


class VgTest:
    """The parts of one `.vgtest` file that matter here."""

    def __init__(self, root, path):
        self.path = path
        self.dir = os.path.dirname(path)
        rel = os.path.relpath(path, root)
        self.name = rel[: -len(".vgtest")]
        self.base = os.path.basename(self.name)
        self.vgopts = ""
        self.prog = None
        self.prog_asis = False
        self.args = ""
        self.env = []
        self.prereq = None
        self.cleanup = None
        self.stdout_filter = None
        self.stdout_filter_args = None
        self.progB = None
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if re.match(r"^\s*(#|$)", line):
                    continue
                m = re.match(r"^\s*([A-Za-z_-]+):\s*(.*)$", line)
                if not m:
                    continue
                key, val = m.group(1), m.group(2)
                if key == "vgopts":
                    self.vgopts += " " + val.replace("${PWD}", self.dir)
                elif key == "prog":
                    self.prog = val
                elif key == "prog-asis":
                    self.prog, self.prog_asis = val, True
                elif key == "args":
                    self.args = val
                elif key == "env":
                    self.env.append(val)
                elif key == "prereq":
                    self.prereq = val
                elif key == "cleanup":
                    self.cleanup = val
                elif key == "stdout_filter":
                    self.stdout_filter = val
                elif key == "stdout_filter_args":
                    self.stdout_filter_args = val
                elif key == "progB":
                    self.progB = val

    def command(self):
        """The shell text that runs the program (without any tool in front)."""
        prog = self.prog
        if not self.prog_asis and not prog.startswith("/"):
            prog = "./" + prog
        return prog + (" " + self.args if self.args else "")

    def side_effects(self):
        return bool(self.cleanup) or bool(self.prereq and SIDE_EFFECTS.search(self.prereq))


def split_opts(vgopts):
    """Returns (options to give rgrind, options dropped, option that makes the test moot)."""
    try:
        words = shlex.split(vgopts)
    except ValueError:
        words = vgopts.split()
    passed, dropped = [], []
    for w in words:
        if w in ("-q", "--quiet"):
            continue
        if w.startswith("--tool="):
            continue
        if any(w == s or w.startswith(s + "=") for s in SKIP_OPTS):
            return passed, dropped, w
        if w.startswith(PASS_OPTS):
            passed.append(w)
        else:
            dropped.append(w)
    return passed, dropped, None


def sh(cmd, cwd, timeout=60):
    """Runs a helper shell command (prereq, cleanup); returns its exit status."""
    try:
        return subprocess.run(
            ["/bin/sh", "-c", cmd], cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout,
        ).returncode
    except subprocess.TimeoutExpired:
        return 124


class Run:
    """One execution: stdout (raw, and through the test's stdout filter, None without one),
    exit status (negative: killed by that signal)."""

    def __init__(self, stdout, filtered, status, stderr, timed_out, seconds):
        self.stdout = stdout
        self.filtered = filtered
        self.status = status
        self.stderr = stderr
        self.timed_out = timed_out
        self.seconds = seconds

    def status_text(self):
        if self.timed_out:
            return "timeout"
        if self.status < 0:
            try:
                name = signal.Signals(-self.status).name
            except ValueError:
                name = "SIGRT"
            return "signal %d (%s)" % (-self.status, name)
        return "exit %d" % self.status


def execute(test, shell_cmd, out_base, timeout):
    out_path, err_path = out_base + ".stdout", out_base + ".stderr"
    t0 = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        p = subprocess.Popen(
            ["/bin/sh", "-c", shell_cmd], cwd=test.dir, stdin=subprocess.DEVNULL,
            stdout=out, stderr=err, start_new_session=True,
        )
        timed_out = False
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    seconds = time.monotonic() - t0
    # Anything the program left running in its group goes too.
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    with open(out_path, "rb") as f:
        stdout = f.read()
    filtered = None
    if test.stdout_filter:
        filt = test.stdout_filter + " " + (test.stdout_filter_args or test.base)
        r = subprocess.run(
            ["/bin/sh", "-c", filt], cwd=test.dir, input=stdout,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        filtered = r.stdout
    with open(err_path, "rb") as f:
        stderr = f.read()
    return Run(stdout, filtered, p.returncode, stderr, timed_out, seconds)


def first_difference(a, b):
    """Describes the first differing line of two outputs (a: native, b: rgrind)."""
    la, lb = a.decode(errors="replace").split("\n"), b.decode(errors="replace").split("\n")
    for i in range(max(len(la), len(lb))):
        x = la[i] if i < len(la) else None
        y = lb[i] if i < len(lb) else None
        if x != y:
            def show(s):
                return "<end of output>" if s is None else repr(s[:160])
            return "stdout line %d: native %s, rgrind %s" % (i + 1, show(x), show(y))
    return "stdout identical"


def imported_symbols(path):
    try:
        r = subprocess.run(
            ["nm", "-D", "--undefined-only", path], stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return set()
    names = set()
    for line in r.stdout.decode(errors="replace").splitlines():
        parts = line.split()
        if parts:
            names.add(parts[-1].split("@")[0])
    return names


def cause_hint(test, rg):
    """Why a failing test probably fails: threads, signals, or nothing known."""
    err = rg.stderr.decode(errors="replace")
    if "threads are not supported" in err:
        return "threads"
    hints = []
    if test.prog and not test.prog_asis:
        binary = os.path.join(test.dir, test.prog.split()[0])
        if os.path.isfile(binary):
            syms = imported_symbols(binary)
            if syms & THREAD_FUNCS:
                hints.append("uses threads")
            if syms & SIGNAL_FUNCS:
                hints.append("installs signal handlers")
    if rg.status < 0 and not hints:
        hints.append("rgrind run killed by signal")
    return ", ".join(hints)


def rgrind_message(rg):
    """The most telling stderr line of the rgrind run."""
    lines = [l for l in rg.stderr.decode(errors="replace").splitlines() if l.strip()]
    for l in lines:
        if "rgrind" in l or "panicked" in l:
            return l.strip()[:200]
    return lines[-1].strip()[:200] if lines else ""


def unbuilt_program(test):
    """The program's path when it is a target of its folder's Makefile.am but was not built."""
    if test.prog_asis:
        return None
    try:
        word = shlex.split(test.prog)[0]
    except (ValueError, IndexError):
        return None
    path = os.path.normpath(os.path.join(test.dir, word))
    if os.path.exists(path):
        return None
    try:
        with open(os.path.join(os.path.dirname(path), "Makefile.am")) as f:
            text = f.read()
    except OSError:
        return None
    token = re.compile(r"(^|\s)" + re.escape(os.path.basename(path)) + r"(\s|\\|$)", re.M)
    return os.path.relpath(path, test.dir) if token.search(text) else None


def run_test(test, opts, outdir, serial_lock):
    """Returns (verdict, detail, log lines)."""
    log = ["== %s (%s)" % (test.name, os.path.relpath(test.path, opts.src))]
    if test.prog is None:
        return "SKIP", "no program: tests a Valgrind option (%s)" % test.vgopts.strip(), log
    if test.progB is not None:
        return "SKIP", "needs a second program (progB, gdbserver)", log
    passed, dropped, moot = split_opts(test.vgopts)
    if moot:
        return "SKIP", "tests the Valgrind option %s, not the program" % moot, log
    # `exec` so that the exit status is the program's own (dash would report a signal as 128+N).
    prefix = "".join("export %s; " % e for e in test.env) + "exec "
    native_cmd = prefix + test.command()
    rgrind_cmd = prefix + " ".join(
        [shlex.quote(opts.rgrind), "--tool=none", "-q"] + [shlex.quote(p) for p in passed]
    ) + " " + test.command()
    log.append("native: " + native_cmd)
    log.append("rgrind: " + rgrind_cmd)
    if dropped:
        log.append("dropped Valgrind options: " + " ".join(dropped))

    lock = serial_lock if test.side_effects() else None
    if lock:
        lock.acquire()
    try:
        runs = {}
        for kind, cmd in (("native1", native_cmd), ("native2", native_cmd), ("rgrind", rgrind_cmd)):
            if test.prereq:
                rc = sh(test.prereq, test.dir)
                if rc != 0:
                    log.append("prereq failed (%d): %s" % (rc, test.prereq))
                    if kind == "native1":
                        return "SKIP", "prereq failed: %s" % test.prereq, log
                    return "UNSTABLE", "prereq failed on a later run: %s" % test.prereq, log
            if kind == "native1":
                missing = unbuilt_program(test)
                if missing:
                    return "SKIP", "not built: %s (see the build log)" % missing, log
            out_base = os.path.join(outdir, test.name.replace("/", "__") + "." + kind)
            runs[kind] = execute(test, cmd, out_base, opts.timeout)
            if test.cleanup:
                sh(test.cleanup, test.dir)
            r = runs[kind]
            log.append("%s: %s, %.2fs, %d stdout bytes" % (kind, r.status_text(), r.seconds, len(r.stdout)))
    finally:
        if lock:
            lock.release()

    n1, n2, rg = runs["native1"], runs["native2"], runs["rgrind"]
    if n1.timed_out or n2.timed_out:
        return "UNSTABLE", "native run timed out after %ss" % opts.timeout, log
    if n1.status != n2.status:
        return "UNSTABLE", "native exit status varies (%s, %s)" % (n1.status_text(), n2.status_text()), log
    native_out, rgrind_out, note = n1.stdout, rg.stdout, ""
    if n1.stdout != n2.stdout:
        if n1.filtered is None or n1.filtered != n2.filtered:
            return "UNSTABLE", "native stdout varies: " + first_difference(
                n1.stdout, n2.stdout).replace("rgrind", "second run"), log
        # The test's own stdout filter (e.g. addresses to 0x........) makes it stable.
        log.append("raw native stdout varies; comparing through " + test.stdout_filter)
        native_out, rgrind_out = n1.filtered, rg.filtered
        note = "(native stdout varies: compared through %s)" % os.path.basename(
            test.stdout_filter.split()[0])
    problems = []
    if rg.timed_out:
        problems.append("rgrind timed out after %ss (native %.2fs)" % (opts.timeout, n1.seconds))
    elif rg.status != n1.status:
        problems.append("status: native %s, rgrind %s" % (n1.status_text(), rg.status_text()))
    if rgrind_out != native_out:
        problems.append(first_difference(native_out, rgrind_out))
    if not problems:
        return "PASS", note, log
    if note:
        problems.append(note)
    msg = rgrind_message(rg)
    if msg:
        problems.append("rgrind stderr: " + msg)
    hint = cause_hint(test, rg)
    if hint:
        problems.append("[" + hint + "]")
    return "FAIL", "; ".join(problems), log


def find_tests(src, dirs):
    root = os.path.join(src, "none", "tests")
    tests = []
    for d in dirs:
        full = os.path.normpath(os.path.join(root, d))
        if not os.path.isdir(full):
            continue
        for f in sorted(os.listdir(full)):
            if f.endswith(".vgtest"):
                tests.append(VgTest(root, os.path.join(full, f)))
    return tests


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="built Valgrind source tree")
    ap.add_argument("--rgrind", required=True)
    ap.add_argument("--only", default="", help="comma-separated test names (args, amd64/bug132918)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--log", required=True)
    ap.add_argument("--dirs", default=".,amd64,linux,amd64-linux,scripts")
    opts = ap.parse_args()
    opts.src = os.path.abspath(opts.src)
    opts.rgrind = os.path.abspath(opts.rgrind)

    tests = find_tests(opts.src, [d for d in opts.dirs.split(",") if d])
    if opts.only:
        wanted = [w.strip() for w in opts.only.split(",") if w.strip()]
        tests = [t for t in tests if t.name in wanted or t.base in wanted]
        known = {t.name for t in tests} | {t.base for t in tests}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            print("vg-none-tests: no such test: %s" % ", ".join(unknown), file=sys.stderr)
            return 2
    outdir = os.path.join(os.path.dirname(os.path.abspath(opts.log)), "vg-none-tests-out")
    os.makedirs(outdir, exist_ok=True)

    serial_lock = threading.Lock()
    counts = {"PASS": 0, "FAIL": 0, "UNSTABLE": 0, "SKIP": 0}
    width = max([len(t.name) for t in tests] + [10])
    with open(opts.log, "w") as log, concurrent.futures.ThreadPoolExecutor(max(1, opts.jobs)) as pool:
        log.write("rgrind: %s\nsource: %s\ntimeout: %ss, jobs: %d\n\n" % (
            opts.rgrind, opts.src, opts.timeout, opts.jobs))
        futures = [pool.submit(run_test, t, opts, outdir, serial_lock) for t in tests]
        for t, fut in zip(tests, futures):
            try:
                verdict, detail, lines = fut.result()
            except Exception as e:  # a bug here must not hide the other results
                verdict, detail, lines = "FAIL", "runner error: %r" % (e,), ["== " + t.name]
            counts[verdict] += 1
            line = "%-8s %-*s %s" % (verdict, width, t.name, detail)
            print(line.rstrip(), flush=True)
            log.write("\n".join(lines) + "\n" + line.rstrip() + "\n\n")
        summary = "%d passed, %d failed (%d unstable natively, %d skipped; %d tests)" % (
            counts["PASS"], counts["FAIL"], counts["UNSTABLE"], counts["SKIP"], len(tests))
        log.write(summary + "\n")
    print(summary)
    print("details: %s (outputs in %s)" % (opts.log, outdir))
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
