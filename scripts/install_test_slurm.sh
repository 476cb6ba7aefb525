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
exec bash "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh" install_test_slurm.sh "${missing[@]}"
