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
exec bash "$(dirname "${BASH_SOURCE[0]}")/apt_install.sh" install_test_hosts.sh "${missing[@]}"
