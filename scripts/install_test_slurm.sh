#!/usr/bin/env bash
# What the SLURM tests (tests/test_slurm.py) need beyond the virtual environment: Debian's
# slurm-wlm (slurmctld, slurmd and the client commands), munge (the credentials slurmctld and
# slurmd exchange) and libpmix-dev (srun --mpi=pmix: SLURM's PMIx plugin opens the unversioned
# libpmix.so, which only the -dev package ships). Installs them when missing, as root; does
# nothing when they are there. Services are not started: the tests start their own munged,
# slurmctld and slurmd, with a configuration made for the run, listening on 127.0.0.1.
#
#   bash scripts/install_test_slurm.sh
set -euo pipefail

missing=()
[[ -x /usr/sbin/slurmctld && -x /usr/sbin/slurmd && -x /usr/bin/sbatch ]] || missing+=(slurm-wlm)
[[ -x /usr/sbin/munged && -x /usr/sbin/mungekey ]] || missing+=(munge)
compgen -G '/usr/lib/*/pmix2/lib/libpmix.so' >/dev/null || missing+=(libpmix-dev)
[[ ${#missing[@]} -gt 0 ]] || exit 0
# Test files run in parallel processes (scripts/test.sh): one install at a time, each waiting
# for the one before it (which may have installed everything) and for dpkg's lock.
if [[ -z "${BERT_INSTALL_LOCKED:-}" ]]; then
  exec env BERT_INSTALL_LOCKED=1 flock /tmp/bert-tf2-apt.lock bash "${BASH_SOURCE[0]}" "$@"
fi

if [[ "$(id -u)" != 0 ]]; then
  echo "install_test_slurm.sh: ${missing[*]} missing and this is not root; install them as root." >&2
  exit 1
fi
# No service may start during the install (munged, slurmctld and slurmd would start with
# Debian's configuration): Debian's maintainer scripts ask /usr/sbin/policy-rc.d, and 101 means
# "do not start".
guard=""
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  guard=/usr/sbin/policy-rc.d
  printf '#!/bin/sh\nexit 101\n' >"$guard"
  chmod 755 "$guard"
  trap 'rm -f "$guard"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_test_slurm.sh: installed ${missing[*]}"
