"""The Kubernetes manifests in kubernetes/ as a cluster gets them. Every kustomization builds with
the real kustomize (`kubectl kustomize`, as `kubectl apply -k` runs it), and every object it renders
is valid: Kubernetes' own objects against the API schemas of Kubernetes 1.32 (kubernetes-validate,
strict: no unknown field), the MPIJob against the MPI operator's CRD (a test fixture) and what the
operator's Go validation refuses, its pod templates against core/v1 PodTemplateSpec. Then what the
rendered job does: the launcher's command passes our launcher's --dry_run; the wrapper maps the
preemption status, remembers a permanent failure and waits for the workers; the worker relay writes
the STOP files; GPUs, grace periods, /dev/shm, the volume and the InfiniBand overlay fit together."""

import copy
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import yaml

from common.errors import PREEMPTED_EXIT_STATUS

# kustomize (kubectl) and the shell scripts run as processes.
pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S = os.path.join(ROOT, "kubernetes")
RETRYABLE = os.path.join(K8S, "retryable.sh")
WORKER = os.path.join(K8S, "worker.sh")
CRD = os.path.join(ROOT, "tests", "fixtures", "mpijob-v2beta1-crd.yaml")
KUSTOMIZATIONS = ["base", "overlays/infiniband"]
# The Kubernetes release whose API schemas the objects must satisfy: that of the kubectl (v1.32,
# Kustomize v5.5.0) the docs and CI use.
KUBERNETES = "1.32"
KUBECTL = shutil.which("kubectl")

# What the MPI operator's Go validation refuses and its CRD does not say
# (pkg/apis/kubeflow/validation/validation.go, ValidateMPIJob).
RESTART_POLICIES = {"Never", "OnFailure"}  # ExitCode and Always are refused for v2beta1
CLEAN_POD_POLICIES = {"None", "Running", "All"}


def _load(path):
    with open(path) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def _kustomize(folder):
    """The objects `kubectl apply -k folder` would send, as kustomize renders them."""
    if KUBECTL is None:
        pytest.skip("kubectl (which carries kustomize) is not installed")
    result = subprocess.run([KUBECTL, "kustomize", folder], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kubectl kustomize {folder} refused it: {result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


@pytest.fixture(scope="module")
def rendered():
    return {name: _kustomize(os.path.join(K8S, name)) for name in KUSTOMIZATIONS}


def _mpijob(docs):
    (job,) = [doc for doc in docs if doc["kind"] == "MPIJob"]
    return job


@pytest.fixture(scope="module")
def mpijob(rendered):
    return _mpijob(rendered["base"])


def _container(job, replica):
    return job["spec"]["mpiReplicaSpecs"][replica]["template"]["spec"]["containers"][0]


def _pod(job, replica):
    return job["spec"]["mpiReplicaSpecs"][replica]["template"]["spec"]


def _env(container):
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def _kubernetes_errors(doc):
    """Why the API server of KUBERNETES would refuse `doc` (a core Kubernetes object) with strict
    field validation (kubectl's default): "" when it would not."""
    kv = pytest.importorskip("kubernetes_validate")
    try:
        kv.validate(doc, KUBERNETES, strict=True)
    except kv.ValidationError as e:
        return str(e)
    return ""


def _schema_validator(schema):
    import jsonschema

    return jsonschema.Draft7Validator(schema)


def _pod_template_validator():
    """core/v1 PodTemplateSpec of KUBERNETES, strict, from kubernetes-validate's schemas."""
    pytest.importorskip("kubernetes_validate")
    import jsonschema
    from kubernetes_validate.utils import schema_contents
    from referencing import Registry, Resource

    folder = f"kubernetes-json-schema/v{KUBERNETES}.0-local-strict"
    schema = schema_contents(f"{folder}/podtemplatespec-v1.json", KUBERNETES)
    definitions = schema_contents(f"{folder}/_definitions.json", KUBERNETES)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _strict(schema):
    """A CRD schema as the API server's strict field validation applies it: an object that lists
    its properties takes no other field (unless it preserves unknown fields)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {key: _strict(value) for key, value in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema:
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            strict["additionalProperties"] = False
    return strict


@pytest.fixture(scope="module")
def crd_validator():
    (crd,) = _load(CRD)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v2beta1"]
    return _schema_validator(_strict(version["schema"]["openAPIV3Schema"]))


def _operator_refusals(job):
    """What the operator's ValidateMPIJob would refuse in `job` (it creates nothing then)."""
    spec = job["spec"]
    refusals = []
    workers = spec["mpiReplicaSpecs"].get("Worker", {}).get("replicas", 1)
    host = f"{job['metadata']['name']}-worker-{workers - 1}"  # must be a DNS label
    if not (len(host) <= 63 and host.replace("-", "").isalnum() and host.islower()):
        refusals.append(f"metadata.name: {host} is no DNS label")
    if spec.get("slotsPerWorker", 1) < 0:
        refusals.append("spec.slotsPerWorker < 0")
    if not spec.get("sshAuthMountPath", "/root/.ssh"):
        refusals.append("spec.sshAuthMountPath is empty")
    if spec["runPolicy"].get("cleanPodPolicy", "None") not in CLEAN_POD_POLICIES:
        refusals.append("spec.runPolicy.cleanPodPolicy")
    for field in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        if spec["runPolicy"].get(field, 0) < 0:
            refusals.append(f"spec.runPolicy.{field} < 0")
    for name, replica in spec["mpiReplicaSpecs"].items():
        if replica.get("restartPolicy") not in RESTART_POLICIES:
            refusals.append(f"{name}.restartPolicy {replica.get('restartPolicy')}")
        if "replicas" not in replica or not replica["template"]["spec"].get("containers"):
            refusals.append(f"{name}: replicas and a container are required")
    if spec["mpiReplicaSpecs"].get("Launcher", {}).get("replicas") != 1:
        refusals.append("Launcher.replicas must be 1")
    if workers < 1:
        refusals.append("Worker.replicas must be >= 1")
    return refusals


def _mpijob_errors(job, crd_validator, pod_template_validator):
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in crd_validator.iter_errors(job)]
    errors += _operator_refusals(job)
    for name, replica in job["spec"]["mpiReplicaSpecs"].items():
        errors += [
            f"{name}.template.{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in pod_template_validator.iter_errors(replica["template"])
        ]
    return errors


def test_every_kustomization_builds_with_kustomize(rendered):
    found = sorted(
        os.path.relpath(folder, K8S) for folder, _, files in os.walk(K8S) if "kustomization.yaml" in files
    )
    assert found == KUSTOMIZATIONS  # a new one is built and validated here too
    for name, docs in rendered.items():
        assert [doc["kind"] for doc in docs] == ["MPIJob"], name  # the volume is applied on its own


def test_kustomize_refuses_an_overlay_inside_its_base(tmp_path):
    # The layout kustomize refuses ("cycle detected"): the checks above would see it fail.
    (tmp_path / "kustomization.yaml").write_text("resources: [job.yaml]\n")
    (tmp_path / "job.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    overlay = tmp_path / "overlays" / "x"
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text("resources: [../..]\n")
    if KUBECTL is None:
        pytest.skip("kubectl (which carries kustomize) is not installed")
    result = subprocess.run([KUBECTL, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "cycle" in result.stderr


def test_kubernetes_objects_are_valid_for_the_api_server(rendered):
    plain = []  # manifests applied on their own (kubectl apply -f), outside every kustomization
    for folder, _, files in os.walk(K8S):
        if "kustomization.yaml" not in files:
            plain += [os.path.join(folder, f) for f in files if f.endswith((".yaml", ".yml"))]
    assert [os.path.relpath(p, K8S) for p in plain] == ["pvc.yaml"]
    docs = [doc for path in plain for doc in _load(path)]
    docs += [doc for objects in rendered.values() for doc in objects if doc["kind"] != "MPIJob"]
    assert docs
    for doc in docs:
        assert _kubernetes_errors(doc) == "", doc["kind"]


def test_crd_fixture_is_a_valid_crd_that_names_its_source():
    (crd,) = _load(CRD)
    assert _kubernetes_errors(crd) == ""
    assert crd["metadata"]["name"] == "mpijobs.kubeflow.org"
    with open(CRD) as f:
        header = f.read(600)
    assert "kubeflow/mpi-operator" in header and "v0.6.0" in header


def test_mpijobs_are_valid_for_the_operator_and_their_pods_for_kubernetes(rendered, crd_validator):
    pod_template = _pod_template_validator()
    for name, docs in rendered.items():
        assert _mpijob_errors(_mpijob(docs), crd_validator, pod_template) == [], name


@pytest.mark.parametrize(
    "path, value, refused",
    [
        (("spec", "slotsPerWorkers"), 8, "spec"),  # a misspelled field of the MPIJob
        (("spec", "mpiReplicaSpecs", "Launcher", "restartPolicy"), "ExitCode", "Launcher.restartPolicy"),
        (("spec", "runPolicy", "cleanPodPolicy"), "Finished", "cleanPodPolicy"),
        (
            ("spec", "mpiReplicaSpecs", "Worker", "template", "spec", "terminationGracePeriod"),
            300,
            "Worker.template",
        ),
        (
            ("spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "terminationGracePeriodSeconds"),
            "330",
            "Launcher.template",
        ),
    ],
)
def test_validation_refuses_what_the_cluster_would(mpijob, crd_validator, path, value, refused):
    job = copy.deepcopy(mpijob)
    node = job
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    errors = _mpijob_errors(job, crd_validator, _pod_template_validator())
    assert errors and all(refused in e for e in errors), errors


def test_images_reach_both_containers(tmp_path):
    base = tmp_path / "base"
    shutil.copytree(os.path.join(K8S, "base"), base)
    (kustomization,) = _load(base / "kustomization.yaml")
    (image,) = kustomization["images"]
    image.update(newName="registry.example.com/team/bert-tf2", newTag="v7")
    (base / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    job = _mpijob(_kustomize(str(base)))
    for replica in ("Launcher", "Worker"):
        assert _container(job, replica)["image"] == "registry.example.com/team/bert-tf2:v7", replica


def test_infiniband_overlay_adds_only_rdma_ipc_lock_and_nccl(rendered, mpijob):
    job = _mpijob(rendered["overlays/infiniband"])
    worker = _container(job, "Worker")
    assert worker["resources"]["limits"]["rdma/ib"] == 1
    assert worker["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert _env(_container(job, "Launcher"))["NCCL_IB_DISABLE"] == "0"
    del worker["resources"]["limits"]["rdma/ib"], worker["securityContext"]
    _container(job, "Launcher")["env"].pop()
    assert job == mpijob  # the rest is the base's


def test_gpus_shm_and_storage_fit_together(mpijob):
    spec = mpijob["spec"]
    slots = spec["slotsPerWorker"]
    worker = _container(mpijob, "Worker")
    launcher = _container(mpijob, "Launcher")
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == slots  # one rank per GPU
    assert "nvidia.com/gpu" not in launcher["resources"].get("limits", {})  # it trains nothing
    # num_gpus, the 8th positional argument, is every rank the hostfile offers.
    assert int(launcher["args"][7]) == spec["mpiReplicaSpecs"]["Worker"]["replicas"] * slots

    volumes = {v["name"]: v for v in _pod(mpijob, "Worker")["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in worker["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"

    (pvc,) = _load(os.path.join(K8S, "pvc.yaml"))
    assert pvc["kind"] == "PersistentVolumeClaim" and "ReadWriteMany" in pvc["spec"]["accessModes"]
    for replica in ("Launcher", "Worker"):
        container = _container(mpijob, replica)
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in _pod(mpijob, replica)["volumes"]
            if "persistentVolumeClaim" in v
        }
        (mount,) = [m for m in container["volumeMounts"] if m["name"] in claims]
        assert claims[mount["name"]] == pvc["metadata"]["name"], replica
        # Launcher and workers see the results (the STOP files, the checkpoints) at the same path.
        assert _env(container)["RESULTS_DIR"].startswith(mount["mountPath"] + "/"), replica
    assert _env(launcher)["RESULTS_DIR"] == _env(worker)["RESULTS_DIR"]


def test_launcher_outlives_the_workers_checkpoint_and_knows_its_job(mpijob):
    worker_grace = _pod(mpijob, "Worker")["terminationGracePeriodSeconds"]
    assert worker_grace >= 120  # one update plus a checkpoint save
    # Kubernetes' default (30 s) would kill mpirun, and with it the ranks, mid-checkpoint.
    assert _pod(mpijob, "Launcher")["terminationGracePeriodSeconds"] >= worker_grace + 30
    (uid,) = [e for e in _container(mpijob, "Launcher")["env"] if e["name"] == "LAUNCHER_JOB_UID"]
    # The Job controller's label on its pods (Kubernetes 1.27+): a new value for every MPIJob.
    assert (
        uid["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['batch.kubernetes.io/controller-uid']"
    )
    assert mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "Never"  # a new pod per try


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


def _wrapper(command, timeout=30, **env):
    clean = {k: v for k, v in os.environ.items() if k not in ("LAUNCHER_JOB_UID", "WORKER_HOSTFILE")}
    return subprocess.run(
        ["bash", RETRYABLE, "bash", "-c", command],
        env=dict(clean, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# 143 = 128 + SIGTERM: retryable under Kubeflow's ExitCode policy (1-127 permanent, 128-255 retryable).
@pytest.mark.parametrize(
    "status, expected",
    [(0, 0), (PREEMPTED_EXIT_STATUS, 143), (1, 1), (2, 2), (137, 137)],
)
def test_wrapper_maps_only_the_preemption_status(status, expected):
    result = _wrapper(f"exit {status}")
    assert result.returncode == expected
    assert ("preempted" in result.stderr) == (status == PREEMPTED_EXIT_STATUS)


def test_wrapper_takes_another_retryable_status_and_refuses_a_permanent_one():
    assert _wrapper(f"exit {PREEMPTED_EXIT_STATUS}", RETRYABLE_EXIT_STATUS="200").returncode == 200
    refused = _wrapper(f"exit {PREEMPTED_EXIT_STATUS}", RETRYABLE_EXIT_STATUS="75")
    assert refused.returncode == 2 and "128-255" in refused.stderr


def test_wrapper_relays_sigterm_and_maps_the_resulting_preemption():
    # The stand-in takes SIGTERM as the launchers do: it stops (with a checkpoint) and exits 75.
    stand_in = "trap 'exit 75' TERM; echo ready; while true; do sleep 0.1; done"
    proc = subprocess.Popen(["bash", RETRYABLE, "bash", "-c", stand_in], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143


@pytest.fixture
def listening_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def stand_in_ssh(tmp_path):
    """A stand-in ssh first on PATH: it records what the launcher asks of each worker (the real
    one would signal this machine's PID 1)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "ssh.log"
    (bin_dir / "ssh").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "ssh").chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}", log


def test_wrapper_ends_every_later_attempt_of_a_job_after_a_permanent_failure(
    tmp_path, listening_port, stand_in_ssh
):
    results = tmp_path / "results"
    ran = tmp_path / "ran"
    path, ssh_log = stand_in_ssh
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.1 slots=8\n")
    job = dict(
        RESULTS_DIR=str(results),
        HOSTNAME="bert-pretraining-launcher",
        WORKER_HOSTFILE=str(hostfile),
        WORKER_SSH_PORT=str(listening_port),
        PATH=path,
    )
    for status in (PREEMPTED_EXIT_STATUS, 137):  # retryable: nothing remembered, workers kept
        assert _wrapper(f"exit {status}", LAUNCHER_JOB_UID="uid-1", **job).returncode in (143, 137)
    assert not results.exists() and not ssh_log.exists()

    first = _wrapper("exit 2", LAUNCHER_JOB_UID="uid-1", **job)
    assert first.returncode == 2
    assert "permanent failure" in first.stderr and "kubectl delete mpijob bert-pretraining" in first.stderr
    # The worker pods are let go (worker.sh ends on SIGUSR2): their GPUs are free at once.
    (asked,) = ssh_log.read_text().splitlines()
    assert asked.startswith(f"-p {listening_port} ") and asked.endswith(" 127.0.0.1 kill -USR2 1")
    again = _wrapper(f"touch {ran}", LAUNCHER_JOB_UID="uid-1", **job)
    assert again.returncode == 2 and not ran.exists()  # the Job's retry stops at once
    assert "an earlier attempt of this job ended with status 2" in again.stderr

    # The same MPIJob applied again is a new launcher Job: it runs (and continues the run).
    assert _wrapper(f"touch {ran}", LAUNCHER_JOB_UID="uid-2", **job).returncode == 0 and ran.exists()


def test_wrapper_waits_for_the_workers_and_names_a_missing_one(tmp_path, listening_port, stand_in_ssh):
    hostfile = tmp_path / "hostfile"
    ran = tmp_path / "ran"
    path, ssh_log = stand_in_ssh
    job = dict(
        RESULTS_DIR=str(tmp_path / "results"),
        LAUNCHER_JOB_UID="uid-1",
        WORKER_HOSTFILE=str(hostfile),
        WORKER_SSH_PORT=str(listening_port),
        WORKER_WAIT_SECONDS="2",
        PATH=path,
    )
    hostfile.write_text("127.0.0.1 slots=8\n")
    assert _wrapper(f"touch {ran}", **job).returncode == 0 and ran.exists()

    ran.unlink()
    hostfile.write_text("127.0.0.1 slots=8\nbert-pretraining-worker-1.bert-pretraining.invalid slots=8\n")
    started = time.monotonic()
    lost = _wrapper(f"touch {ran}", **job)
    assert lost.returncode == 2 and not ran.exists()
    assert time.monotonic() - started < 20
    assert "worker(s) bert-pretraining-worker-1.bert-pretraining.invalid did not answer" in lost.stderr
    assert "does not recreate a worker pod that ended Failed" in lost.stderr
    assert "permanent failure" in lost.stderr  # and the Job's later attempts end at once
    assert "127.0.0.1 kill -USR2 1" in ssh_log.read_text()  # the worker that answered is let go


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


def test_worker_ends_with_its_sshd_when_the_launcher_lets_it_go(tmp_path):
    sshd = tmp_path / "sshd"
    sshd.write_text(f"#!/bin/sh\necho $$ > {tmp_path / 'sshd.pid'}\necho ready\nexec sleep 30\n")
    sshd.chmod(0o755)
    env = dict(os.environ, RESULTS_DIR=str(tmp_path / "results"), SSHD=str(sshd))
    proc = subprocess.Popen(
        ["bash", WORKER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGUSR2)  # what retryable.sh sends over ssh after a permanent failure
        assert proc.wait(timeout=10) == 0  # the pod ends Succeeded, and the operator leaves it so
        sshd_pid = int((tmp_path / "sshd.pid").read_text())
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{sshd_pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{sshd_pid}")
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_worker_refuses_an_image_without_sshd(tmp_path):
    env = dict(os.environ, SSHD=str(tmp_path / "missing"))
    result = subprocess.run(["bash", WORKER], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "kubernetes/Dockerfile" in result.stderr
