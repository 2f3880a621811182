#!/usr/bin/env bash
# Installs the host packages Burrow needs on Debian 12 (bookworm), as root. Idempotent.
#   runsc      gVisor, pinned to the bookworm-backports build: checkpoint images only restore on the version
#              that wrote them (shared research, probe-gvisor-2024 §5.8), and the 2022 bookworm build has
#              the statx and checkpoint bugs listed in probe-gvisor-2022.
#   mmdebstrap builds template root filesystems from Debian packages.
#   gcc        compiles the in-sandbox exec agent (packages/runtime-gvisor/agent, static; docs/adr/0003).
#   postgresql PostgreSQL 15, for the Postgres store and its tests.
#   python3-pip pip on the host: network tests download from the test internet's package index.
#   openssl    makes the test internet's throwaway CA and server certificate.
#   chromium   the headless browser that the preview URL and web console tests drive through playwright-core.
set -euo pipefail
RUNSC_VERSION="0.0~20240729.0-4~bpo12+2"

if [ "$(id -u)" != 0 ]; then echo "install-deps: run as root (sudo)" >&2; exit 1; fi
export DEBIAN_FRONTEND=noninteractive

if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/bookworm-backports.list
fi
cat > /etc/apt/preferences.d/burrow-runsc <<PREF
Package: runsc
Pin: version ${RUNSC_VERSION}
Pin-Priority: 1001
PREF

need=()
[ "$(dpkg-query -W -f='${Version}' runsc 2>/dev/null || true)" = "$RUNSC_VERSION" ] || need+=("runsc=${RUNSC_VERSION}")
for pkg in mmdebstrap e2fsprogs util-linux iproute2 nftables postgresql-15 ca-certificates curl tmux gcc libc6-dev python3-pip openssl chromium; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}" >&2
  apt-get update -qq
  apt-get install -y -q --allow-downgrades "${need[@]}"
fi
runsc --version | sed -n 1p   # sed reads all input: no SIGPIPE under pipefail
