"""The Kubernetes manifests in kubernetes/: they load as YAML; the MPIJob has the MPI operator's
v2beta1 shape (a structural check against the fields and values the operator's API and validation
accept: no maintained model of MPIJob v2beta1 installs from the package index); its pod templates
are valid core/v1 PodTemplateSpecs (Kubeflow Trainer's API models, kubeflow-trainer-api); the
launcher's command passes our launcher's --dry_run with the environment the manifest sets; the
wrapper maps the preemption status 75 to a retryable one and leaves the rest alone; the worker
relay writes the STOP files; GPUs, /dev/shm, the volume and the InfiniBand overlay fit together."""

import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
import yaml

from common.errors import PREEMPTED_EXIT_STATUS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S = os.path.join(ROOT, "kubernetes")
RETRYABLE = os.path.join(K8S, "retryable.sh")
WORKER = os.path.join(K8S, "worker.sh")

# MPIJob v2beta1 (kubeflow/mpi-operator, pkg/apis/kubeflow/v2beta1/types.go and validation.go):
# the spec's fields and the values the operator accepts; anything else is refused or ignored.
MPIJOB_SPEC_FIELDS = {
    "slotsPerWorker",
    "runLauncherAsWorker",
    "runPolicy",
    "mpiReplicaSpecs",
    "sshAuthMountPath",
    "launcherCreationPolicy",
    "mpiImplementation",
}
RUN_POLICY_FIELDS = {
    "cleanPodPolicy",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "backoffLimit",
    "schedulingPolicy",
    "suspend",
    "managedBy",
}
REPLICA_SPEC_FIELDS = {"replicas", "template", "restartPolicy"}
RESTART_POLICIES = {"Never", "OnFailure"}  # v2beta1's validation refuses Always and ExitCode
CLEAN_POD_POLICIES = {"None", "Running", "All"}
MPI_IMPLEMENTATIONS = {"OpenMPI", "Intel", "MPICH"}
LAUNCHER_CREATION_POLICIES = {"AtStartup", "WaitForWorkersReady"}


def _load(path):
    with open(os.path.join(K8S, path)) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


@pytest.fixture(scope="module")
def mpijob():
    (doc,) = _load("mpijob-pretraining.yaml")
    return doc


def _container(job, replica):
    return job["spec"]["mpiReplicaSpecs"][replica]["template"]["spec"]["containers"][0]


def _env(container):
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_every_manifest_loads_as_yaml():
    names = []
    for folder, _, files in os.walk(K8S):
        for name in files:
            if name.endswith((".yaml", ".yml")):
                docs = _load(os.path.relpath(os.path.join(folder, name), K8S))
                assert docs and all(isinstance(d, dict) for d in docs), name
                names.append(name)
    assert {"mpijob-pretraining.yaml", "pvc.yaml", "kustomization.yaml"} <= set(names)


def test_mpijob_has_the_v2beta1_shape_the_operator_accepts(mpijob):
    assert mpijob["apiVersion"] == "kubeflow.org/v2beta1"
    assert mpijob["kind"] == "MPIJob"
    spec = mpijob["spec"]
    assert set(spec) <= MPIJOB_SPEC_FIELDS
    assert set(spec["runPolicy"]) <= RUN_POLICY_FIELDS
    assert spec["runPolicy"]["cleanPodPolicy"] in CLEAN_POD_POLICIES
    assert isinstance(spec["runPolicy"]["backoffLimit"], int) and spec["runPolicy"]["backoffLimit"] > 0
    assert spec["mpiImplementation"] in MPI_IMPLEMENTATIONS
    assert spec["launcherCreationPolicy"] in LAUNCHER_CREATION_POLICIES
    assert isinstance(spec["slotsPerWorker"], int) and spec["slotsPerWorker"] >= 1
    assert spec["sshAuthMountPath"] == "/root/.ssh"  # the image runs as root
    assert set(spec["mpiReplicaSpecs"]) == {"Launcher", "Worker"}
    for name, replica in spec["mpiReplicaSpecs"].items():
        assert set(replica) <= REPLICA_SPEC_FIELDS, name
        assert replica["restartPolicy"] in RESTART_POLICIES, name
        assert replica["template"]["spec"]["containers"], name
        assert "restartPolicy" not in replica["template"]["spec"], name  # the replica's wins
    assert spec["mpiReplicaSpecs"]["Launcher"]["replicas"] == 1
    workers = spec["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert workers >= 1
    # The operator refuses a job whose last worker's host name is no DNS label.
    host = f"{mpijob['metadata']['name']}-worker-{workers - 1}"
    assert len(host) <= 63 and host.replace("-", "").isalnum() and host.islower()


def test_pod_templates_are_valid_core_v1_pod_template_specs(mpijob):
    models = pytest.importorskip("kubeflow_trainer_api.models.io_k8s_api_core_v1_pod_template_spec")
    model = models.IoK8sApiCoreV1PodTemplateSpec

    def unknown(given, parsed, path=""):
        """Keys of `given` the model dropped (it ignores fields it does not know)."""
        if isinstance(given, dict):
            missing = [f"{path}.{k}" for k in given if not isinstance(parsed, dict) or k not in parsed]
            return missing + [
                m
                for k in given
                if isinstance(parsed, dict) and k in parsed
                for m in unknown(given[k], parsed[k], f"{path}.{k}")
            ]
        if isinstance(given, list):
            return [m for i, (g, p) in enumerate(zip(given, parsed)) for m in unknown(g, p, f"{path}[{i}]")]
        return []

    for name, replica in mpijob["spec"]["mpiReplicaSpecs"].items():
        template = replica["template"]
        parsed = model.from_dict(template).to_dict()
        assert unknown(template, parsed) == [], name
        for container in template["spec"]["containers"]:
            assert container["name"] and container["image"], name


def test_gpus_shm_and_storage_fit_together(mpijob):
    spec = mpijob["spec"]
    slots = spec["slotsPerWorker"]
    worker = _container(mpijob, "Worker")
    launcher = _container(mpijob, "Launcher")
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == slots  # one rank per GPU
    assert "nvidia.com/gpu" not in launcher["resources"].get("limits", {})  # it trains nothing
    # num_gpus, the 8th positional argument, is every rank the hostfile offers.
    assert int(launcher["args"][7]) == spec["mpiReplicaSpecs"]["Worker"]["replicas"] * slots

    worker_pod = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    volumes = {v["name"]: v for v in worker_pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in worker["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert worker_pod["terminationGracePeriodSeconds"] >= 120  # one update plus a checkpoint save

    (pvc,) = _load("pvc.yaml")
    assert pvc["kind"] == "PersistentVolumeClaim" and "ReadWriteMany" in pvc["spec"]["accessModes"]
    for replica in ("Launcher", "Worker"):
        pod = spec["mpiReplicaSpecs"][replica]["template"]["spec"]
        container = _container(mpijob, replica)
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in pod["volumes"]
            if "persistentVolumeClaim" in v
        }
        (mount,) = [m for m in container["volumeMounts"] if m["name"] in claims]
        assert claims[mount["name"]] == pvc["metadata"]["name"], replica
        # Launcher and workers see the results (the STOP files, the checkpoints) at the same path.
        assert _env(container)["RESULTS_DIR"].startswith(mount["mountPath"] + "/"), replica
    assert _env(launcher)["RESULTS_DIR"] == _env(worker)["RESULTS_DIR"]


def test_kustomizations_name_what_exists(mpijob):
    (base,) = _load("kustomization.yaml")
    for resource in base["resources"]:
        assert os.path.isfile(os.path.join(K8S, resource)), resource
    images = {image["name"] for image in base["images"]}
    for replica in ("Launcher", "Worker"):
        assert _container(mpijob, replica)["image"] in images

    (overlay,) = _load("overlays/infiniband/kustomization.yaml")
    assert overlay["resources"] == ["../.."]
    (patch,) = overlay["patches"]
    assert patch["target"]["name"] == mpijob["metadata"]["name"]
    for op in yaml.safe_load(patch["patch"]):
        # Every JSON patch adds under a parent that the base has (~1 is an escaped "/").
        parts = [p.replace("~1", "/") for p in op["path"].strip("/").split("/")]
        node = mpijob
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        assert op["op"] == "add" and isinstance(node, (dict, list)), op["path"]
        if parts[-1] == "rdma/ib":
            assert op["value"] == 1


def test_launcher_command_passes_the_launchers_dry_run(mpijob, tmp_path):
    launcher = _container(mpijob, "Launcher")
    command = launcher["command"] + launcher["args"] + ["--dry_run"]
    assert command[:2] == ["bash", "kubernetes/retryable.sh"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "HOROVOD_"))}
    env.update(_env(launcher))
    env.update(
        BERT_DATA_DIR=str(tmp_path / "data"),
        RESULTS_DIR=str(tmp_path / "results"),
        BERT_PYTHON=sys.executable,
    )
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "workers: 16 (mpirun -np 16)" in out
    phase1 = next(
        line for line in out.splitlines() if line.strip().startswith("phase 1: ") and "mpirun" in line
    )
    argv = shlex.split(phase1.split("phase 1: ", 1)[1])
    assert argv[argv.index("--hostfile") + 1] == "/etc/mpi/hostfile"  # the operator's hostfile
    assert argv[argv.index("-np") + 1] == "16"
    rsh = argv[argv.index("plm_rsh_args") + 1]
    assert "StrictHostKeyChecking=no" in rsh and "ConnectionAttempts=10" in rsh
    assert f"--output_dir={tmp_path / 'results'}/phase_1" in argv
    assert "-x" in argv and "NCCL_DEBUG" in argv  # forwarded to every rank
    assert "dry run: nothing checked or started." in out


# 143 = 128 + SIGTERM: retryable under Kubeflow's ExitCode policy (1-127 permanent, 128-255 retryable).
@pytest.mark.parametrize(
    "status, expected",
    [(0, 0), (PREEMPTED_EXIT_STATUS, 143), (1, 1), (2, 2), (137, 137)],
)
def test_wrapper_maps_only_the_preemption_status(status, expected):
    result = subprocess.run(
        ["bash", RETRYABLE, "bash", "-c", f"exit {status}"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == expected
    assert ("preempted" in result.stderr) == (status == PREEMPTED_EXIT_STATUS)


def test_wrapper_takes_another_retryable_status_and_refuses_a_permanent_one():
    run = lambda value: subprocess.run(  # noqa: E731
        ["bash", RETRYABLE, "bash", "-c", f"exit {PREEMPTED_EXIT_STATUS}"],
        env=dict(os.environ, RETRYABLE_EXIT_STATUS=value),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run("200").returncode == 200
    refused = run("75")
    assert refused.returncode == 2 and "128-255" in refused.stderr


def test_wrapper_relays_sigterm_and_maps_the_resulting_preemption():
    # The stand-in takes SIGTERM as the launchers do: it stops (with a checkpoint) and exits 75.
    stand_in = "trap 'exit 75' TERM; echo ready; while true; do sleep 0.1; done"
    proc = subprocess.Popen(["bash", RETRYABLE, "bash", "-c", stand_in], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143


def test_worker_writes_the_stop_file_of_each_phase_on_sigterm(tmp_path):
    results = tmp_path / "results"
    (results / "phase_1").mkdir(parents=True)
    sshd = tmp_path / "sshd"
    sshd.write_text("#!/bin/sh\necho ready\nexec sleep 30\n")
    sshd.chmod(0o755)
    env = dict(os.environ, RESULTS_DIR=str(results), SSHD=str(sshd))
    proc = subprocess.Popen(
        ["bash", WORKER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while not (results / "phase_1" / "STOP").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (results / "phase_1" / "STOP").exists()
        assert not (results / "phase_2").exists()  # no directory of a phase that has not started
        assert proc.poll() is None  # sshd stays up for the checkpoint, until the kubelet's kill
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_worker_refuses_an_image_without_sshd(tmp_path):
    env = dict(os.environ, SSHD=str(tmp_path / "missing"))
    result = subprocess.run(["bash", WORKER], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "kubernetes/Dockerfile" in result.stderr
