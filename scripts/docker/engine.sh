# shellcheck shell=bash
# The container engine behind scripts/docker/*.sh: docker (default) or podman, and the Debian 12
# base image for machines that reach no container registry. Sourced, not run; the sourcing script
# defines die().
#
#   engine_select NAME              docker or podman (BERT_CONTAINER_ENGINE, else docker)
#   engine_autoselect               BERT_CONTAINER_ENGINE, else docker where an engine answers,
#                                   else podman (the test scripts' choice)
#   engine_require                  stops with one sentence when the engine cannot run here
#   engine_ulimits                  --ulimit arguments this process may grant a container
#   engine_image_exists TAG         true when the image is in the engine's local store
#   local_base_build TAG COMPONENTS makes the Debian 12 base from Debian's archive (mmdebstrap)
#
# podman runs containers with the privileges of the calling process: it cannot raise a resource
# limit above this shell's hard limit (without CAP_SYS_RESOURCE) and, on some kernels, not the
# process limit above kernel.pid_max. Its default (1048576 open files) then fails at start with
# "error setting rlimits ... operation not permitted". engine_podman_config therefore writes the
# settings such a machine needs to a containers.conf of this run only (never to the user's),
# named by CONTAINERS_CONF; a CONTAINERS_CONF the user already set is used as it is.

ENGINE="docker"

engine_select() {
  case "$1" in
    docker|podman) ENGINE="$1" ;;
    *) die "--engine must be docker or podman (got '$1')." ;;
  esac
}

engine_autoselect() {
  if [[ -n "${BERT_CONTAINER_ENGINE:-}" ]]; then
    engine_select "${BERT_CONTAINER_ENGINE}"
  elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    ENGINE=docker
  else
    ENGINE=podman
  fi
}

# The hard limits of this shell, which are as high as a podman container's can go.
_hard_limit() {
  local value
  value="$(ulimit -H "$1")"
  if [[ "${value}" == "unlimited" ]]; then echo -1; else echo "${value}"; fi
}

_podman_nofile() { local n; n="$(_hard_limit -n)"; [[ "${n}" == -1 ]] && n=1048576; echo "${n}"; }
_podman_nproc() {
  local n pid_max
  n="$(_hard_limit -u)"
  pid_max="$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)"
  if [[ "${n}" == -1 || "${n}" -gt "${pid_max}" ]]; then n="${pid_max}"; fi
  echo "${n}"
}

engine_podman_config() {
  [[ "${ENGINE}" == podman && -z "${CONTAINERS_CONF:-}" ]] || return 0
  local dir runtime=""
  dir="$(mktemp -d "${TMPDIR:-/tmp}/bert-tf2-podman.XXXXXX")"
  # crun (podman's default runtime on Debian) refuses cgroup v1 layouts like this machine's;
  # runc runs on both.
  if command -v runc >/dev/null 2>&1; then runtime='runtime = "runc"'; fi
  cat > "${dir}/containers.conf" <<EOF
# Written by scripts/docker/engine.sh for one run; see the comment at the top of that file.
[containers]
default_ulimits = ["nofile=$(_podman_nofile):$(_podman_nofile)", "nproc=$(_podman_nproc):$(_podman_nproc)"]
[engine]
${runtime}
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  export CONTAINERS_CONF="${dir}/containers.conf"
}

engine_require() {
  command -v "${ENGINE}" >/dev/null 2>&1 || {
    local hint="see docs/container.md"
    if [[ "${ENGINE}" == docker ]] && command -v podman >/dev/null 2>&1; then hint="podman is: add --engine podman"; fi
    die "${ENGINE} is not installed on this machine (${hint})."
  }
  if [[ "${ENGINE}" == docker ]] && ! docker info >/dev/null 2>&1; then
    local hint="start it, or use podman with --engine podman"
    command -v podman >/dev/null 2>&1 && hint="podman is installed: add --engine podman"
    die "the docker client cannot reach a Docker engine on this machine (${hint})."
  fi
  engine_podman_config
}

# --ulimit arguments: NVIDIA's (unlimited locked memory for NCCL and InfiniBand, a 64 MB stack)
# where the engine can grant them. docker's daemon holds CAP_SYS_RESOURCE; podman gets at most
# this shell's hard limits, and the open-file and process limits must be named with them because
# a run's --ulimit replaces containers.conf's default_ulimits.
engine_ulimits() {
  local memlock=-1 stack=67108864
  if [[ "${ENGINE}" == podman ]]; then
    local hard_memlock hard_stack
    hard_memlock="$(_hard_limit -l)"
    hard_stack="$(_hard_limit -s)"
    if [[ "${hard_memlock}" != -1 ]]; then memlock=$((hard_memlock * 1024)); fi
    if [[ "${hard_stack}" != -1 && $((hard_stack * 1024)) -lt ${stack} ]]; then stack=$((hard_stack * 1024)); fi
    printf '%s\n' --ulimit "nofile=$(_podman_nofile):$(_podman_nofile)" --ulimit "nproc=$(_podman_nproc):$(_podman_nproc)"
  fi
  printf '%s\n' --ulimit "memlock=${memlock}" --ulimit "stack=${stack}"
}

engine_image_exists() {
  if [[ "${ENGINE}" == podman ]]; then
    podman image exists "$1"
  else
    docker image inspect "$1" >/dev/null 2>&1
  fi
}

# A Debian 12 (bookworm) base image made from Debian's archive with mmdebstrap, for machines that
# reach no container registry. The host's own certificate authorities (from
# /usr/local/share/ca-certificates, where Debian and Ubuntu keep local ones) are added to this
# base only, and pip in it is told to use the system store: where the host reaches package
# registries through a TLS-inspecting proxy, apt and pip inside the build then trust it too, and
# the Dockerfile stays free of any machine's settings.
#   $1  image tag
#   $2  archive components, e.g. main or main,contrib,non-free,non-free-firmware
local_base_build() {
  local tag="$1" components="$2" work status=0
  command -v mmdebstrap >/dev/null 2>&1 \
    || die "--local-base needs mmdebstrap (apt-get install mmdebstrap, as root)."
  work="$(mktemp -d "${TMPDIR:-/tmp}/bert-tf2-base.XXXXXX")"
  # shellcheck disable=SC2016  # $1 is mmdebstrap's: the hook runs with the new root as $1
  local hook='mkdir -p "$1/usr/local/share/ca-certificates/host"
    for crt in /usr/local/share/ca-certificates/*.crt; do
      if [ -f "$crt" ]; then cp "$crt" "$1/usr/local/share/ca-certificates/host/"; fi
    done
    chroot "$1" update-ca-certificates >/dev/null
    printf "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n" > "$1/etc/pip.conf"'
  local archive=http://deb.debian.org/debian security=http://deb.debian.org/debian-security
  local list="${components//,/ }"
  echo "[${LOG_TAG:-docker}] making the Debian 12 base ${tag} from Debian's archive (mmdebstrap; components: ${list})" >&2
  mmdebstrap --quiet --variant=minbase --include=ca-certificates --customize-hook="${hook}" bookworm "${work}/rootfs.tar" \
      "deb ${archive} bookworm ${list}" "deb ${archive} bookworm-updates ${list}" \
      "deb ${security} bookworm-security ${list}" >&2 || status=$?
  if [[ ${status} -eq 0 ]]; then
    "${ENGINE}" import --change 'CMD ["/bin/bash"]' "${work}/rootfs.tar" "${tag}" >/dev/null || status=$?
  fi
  rm -rf "${work}"
  [[ ${status} -eq 0 ]] || die "making the local base image ${tag} failed (the messages above say why)."
}
