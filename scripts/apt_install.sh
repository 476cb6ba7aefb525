#!/usr/bin/env bash
# Installs Debian packages that tests need, as root, the way the tests' install scripts
# (install_test_hosts.sh, install_test_slurm.sh) share: one install at a time across the parallel
# test processes (scripts/test.sh), each waiting for the one before it and for dpkg's lock, and
# leaving out what is installed by then. No service starts during the install (it would listen
# on every address of this machine, with Debian's configuration): Debian's maintainer scripts ask
# /usr/sbin/policy-rc.d, and 101 means "do not start". The tests start their own.
#
#   bash scripts/apt_install.sh CALLER PACKAGE...     (CALLER: the name its messages carry)
set -euo pipefail

caller="$1"
shift
if [[ -z "${BERT_INSTALL_LOCKED:-}" ]]; then
  exec env BERT_INSTALL_LOCKED=1 flock /tmp/bert-tf2-apt.lock bash "${BASH_SOURCE[0]}" "${caller}" "$@"
fi

missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "${package}" 2>/dev/null | grep -q "ok installed" || missing+=("${package}")
done
[[ ${#missing[@]} -gt 0 ]] || exit 0
if [[ "$(id -u)" != 0 ]]; then
  echo "${caller}: ${missing[*]} missing and this is not root; install them as root." >&2
  exit 1
fi
guard=""
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  guard=/usr/sbin/policy-rc.d
  printf '#!/bin/sh\nexit 101\n' >"${guard}"
  chmod 755 "${guard}"
  trap 'rm -f "${guard}"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "${caller}: installed ${missing[*]}"
