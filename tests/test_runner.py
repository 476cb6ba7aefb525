"""launch/runner.py: a launch's steps run in order as child processes, the first failure ends it
with its message and status, and a preemption notice to the launcher (SIGTERM, SIGUSR1, SIGINT)
reaches the running step through its STOP file, or as the signal itself when it has none; the
launcher then exits 75 and starts no further step. Each launcher here is a real process (signals
go to it, not to pytest) running toy steps; no TensorFlow."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from common.errors import PREEMPTED_EXIT_STATUS

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
# A step that writes "started" to its marker, then waits for its STOP file and exits 75, as a worker does.
WAITS_FOR_STOP = (
    "import os, sys, time\n"
    "open(sys.argv[1], 'w').write('started')\n"
    "while not os.path.exists(sys.argv[2]): time.sleep(0.01)\n"
    "sys.exit(75)\n"
)
# A step without a STOP file: records the signal it gets, then exits 0.
TAKES_A_SIGNAL = (
    "import signal, sys, time\n"
    "def on(n, f):\n"
    "    open(sys.argv[1], 'a').write(signal.Signals(n).name + ' ')\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGUSR1, on); signal.signal(signal.SIGTERM, on)\n"
    "open(sys.argv[2], 'w').write('started')\n"
    "time.sleep(60)\n"
)
DRIVER = (
    "import json, sys\n"
    "from launch.engine import Step\n"
    "from launch.runner import Notices, run_steps\n"
    "plan = json.loads(sys.argv[1])\n"
    "with Notices() as notices:\n"
    "    sys.exit(run_steps('toy.sh', [Step(**s) for s in plan['steps']], plan['done'], notices))\n"
)


def _launcher(steps, done="toy.sh: done"):
    plan = json.dumps({"steps": steps, "done": done})
    return subprocess.Popen(
        [PYTHON, "-c", DRIVER, plan],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _step(argv, banner="", failure="", stop_file=""):
    return {"argv": argv, "banner": banner, "failure": failure, "stop_file": stop_file}


def _when(path, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_steps_run_in_order_with_banners_and_the_first_failure_ends_the_launch(tmp_path):
    log = tmp_path / "log"
    say = [PYTHON, "-c", f"import sys; open({str(log)!r}, 'a').write(sys.argv[1])"]
    steps = [
        _step([*say, "1"], banner="toy.sh: first"),
        _step([PYTHON, "-c", "import sys; sys.exit(3)"], failure="toy.sh: error: it stopped ({status})"),
        _step([*say, "3"]),
    ]
    launcher = _launcher(steps)
    out, err = launcher.communicate(timeout=60)
    assert launcher.returncode == 3
    assert log.read_text() == "1"  # the third never started
    assert out.startswith("== toy.sh: first starts (") and "done" not in out
    assert err.strip().splitlines()[-1] == "toy.sh: error: it stopped (3)"

    launcher = _launcher([_step([*say, "a"]), _step([*say, "b"])])
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 0 and log.read_text() == "1ab"
    assert out.startswith("== toy.sh: done (") and out.rstrip().endswith(") ==")


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_a_notice_writes_the_running_steps_stop_file_and_no_further_step_starts(sent, tmp_path):
    started, stop = tmp_path / "started", tmp_path / "out" / "STOP"
    after = tmp_path / "after"
    launcher = _launcher(
        [
            _step([PYTHON, "-c", WAITS_FOR_STOP, str(started), str(stop)], stop_file=str(stop)),
            _step([PYTHON, "-c", f"open({str(after)!r}, 'w')"]),
        ]
    )
    _when(started)
    launcher.send_signal(sent)
    _, err = launcher.communicate(timeout=60)
    assert launcher.returncode == PREEMPTED_EXIT_STATUS, err
    assert stop.exists() and not after.exists()
    assert f"== toy.sh: stopped for a preemption ({sent.name}): re-run the same command to continue ==" in err


def test_a_step_without_a_stop_file_gets_the_signal_itself(tmp_path):
    got, started, after = tmp_path / "got", tmp_path / "started", tmp_path / "after"
    launcher = _launcher(
        [
            _step([PYTHON, "-c", TAKES_A_SIGNAL, str(got), str(started)]),
            _step([PYTHON, "-c", f"open({str(after)!r}, 'w')"]),
        ]
    )
    _when(started)
    launcher.send_signal(signal.SIGUSR1)
    _, err = launcher.communicate(timeout=60)
    # The step ended well, but a notice came: the launch stops before the next step.
    assert launcher.returncode == PREEMPTED_EXIT_STATUS, err
    assert got.read_text() == "SIGUSR1 " and not after.exists()
    assert "stopped for a preemption (SIGUSR1)" in err


def test_a_step_ignores_ctrl_c_which_is_the_launchers_to_relay(tmp_path):
    """Ctrl-C reaches the terminal's whole foreground group: the step must not die of it."""
    started, stop = tmp_path / "started", tmp_path / "out" / "STOP"
    launcher = _launcher(
        [_step([PYTHON, "-c", WAITS_FOR_STOP, str(started), str(stop)], stop_file=str(stop))]
    )
    _when(started)
    (step,) = _children(launcher.pid)
    os.kill(step, signal.SIGINT)  # what the terminal's Ctrl-C gives every process of the group
    time.sleep(0.5)
    assert launcher.poll() is None  # the step lived on
    launcher.send_signal(signal.SIGINT)
    _, err = launcher.communicate(timeout=60)
    assert launcher.returncode == PREEMPTED_EXIT_STATUS and stop.exists(), err


def _children(pid):
    import psutil

    return [c.pid for c in psutil.Process(pid).children()]


def test_run_sub_relay_passes_the_signal_on_and_requeues_on_75(tmp_path):
    """`python -m launch requeue COMMAND...` (scripts/run.sub's batch shell execs it): SIGUSR1 to
    the relay reaches COMMAND; COMMAND's 75 requeues the job through scontrol, and the relay exits 0."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "scontrol").write_text(f'#!/bin/bash\necho "$*" >> {tmp_path}/scontrol.log\n')
    (fake_bin / "scontrol").chmod(0o755)
    started = tmp_path / "started"
    stops = "import signal, sys; signal.signal(signal.SIGUSR1, lambda n, f: sys.exit(75))\n"
    command = [PYTHON, "-c", stops + f"open({str(started)!r}, 'w'); signal.pause()"]
    env = dict(os.environ, PYTHONPATH=ROOT, SLURM_JOB_ID="4242", PATH=f"{fake_bin}:{os.environ['PATH']}")
    relay = subprocess.Popen(
        [PYTHON, "-m", "launch", "requeue", *command], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    _when(started)
    relay.send_signal(signal.SIGUSR1)
    out, _ = relay.communicate(timeout=60)
    assert relay.returncode == 0
    assert "[run.sub] stopped for a preemption with a checkpoint: requeueing job 4242" in out
    assert (tmp_path / "scontrol.log").read_text() == "requeue 4242\n"

    failed = subprocess.run(
        [PYTHON, "-m", "launch", "requeue", PYTHON, "-c", "import sys; sys.exit(4)"], cwd=ROOT, env=env
    )
    assert failed.returncode == 4 and (tmp_path / "scontrol.log").read_text() == "requeue 4242\n"
