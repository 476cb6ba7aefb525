#!/usr/bin/env bash
# What the two-host tests (tests/test_multihost.py) need beyond the virtual environment: Debian's
# OpenSSH server (an sshd runs inside each test namespace) and iproute2 (`ip netns`). Installs
# them when missing, as root; does nothing when they are there. Services are not started: the
# tests start their own sshd, listening only inside their namespaces.
#
#   bash scripts/install_test_hosts.sh
set -euo pipefail

missing=()
[[ -x /usr/sbin/sshd ]] || missing+=(openssh-server)
[[ -x /usr/bin/ssh && -x /usr/bin/ssh-keygen ]] || missing+=(openssh-client)
command -v ip >/dev/null || missing+=(iproute2)
[[ ${#missing[@]} -gt 0 ]] || exit 0
# Test files run in parallel processes (scripts/test.sh): one install at a time, each waiting
# for the one before it (which may have installed everything) and for dpkg's lock.
if [[ -z "${BERT_INSTALL_LOCKED:-}" ]]; then
  exec env BERT_INSTALL_LOCKED=1 flock /tmp/bert-tf2-apt.lock bash "${BASH_SOURCE[0]}" "$@"
fi

if [[ "$(id -u)" != 0 ]]; then
  echo "install_test_hosts.sh: ${missing[*]} missing and this is not root; install them as root." >&2
  exit 1
fi
# No service may start during the install (it would listen on every address of this machine):
# Debian's maintainer scripts ask /usr/sbin/policy-rc.d, and 101 means "do not start".
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
echo "install_test_hosts.sh: installed ${missing[*]}"
