#!/usr/bin/env bash
# Installs what vkubelet's build, `vkubeletctl up` and the test suite need on a fresh
# Debian machine. Idempotent: it installs only what is missing. The control-plane
# binaries are not installed here: vkubeletctl builds and caches them on first use.
set -euo pipefail

need_apt=()
command -v go >/dev/null || { echo "setup: Go is required (https://go.dev/doc/install); the Debian package is too old" >&2; exit 1; }
command -v git >/dev/null || need_apt+=(git)
command -v make >/dev/null || need_apt+=(make)
command -v gcc >/dev/null || need_apt+=(gcc)   # the race detector needs cgo
# The CRI provider (providers/cri) and its tests run real containers: containerd with
# runc, a busybox-static rootfs for the test images, CNI plugins for pod networks.
command -v containerd >/dev/null || need_apt+=(containerd)
command -v runc >/dev/null || [ -x /usr/sbin/runc ] || need_apt+=(runc)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" || need_apt+=(busybox-static)
[ -x /usr/lib/cni/bridge ] || need_apt+=(containernetworking-plugins)
command -v iptables >/dev/null || [ -x /usr/sbin/iptables ] || need_apt+=(iptables)
# The Slurm provider (providers/slurm) and its tests run a private Slurm cluster
# (providers/slurm/slurmenv): slurmctld, slurmd and the client commands, munge for
# their authentication, and podman, which runs the pods' containers inside the jobs.
{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v sbatch >/dev/null; } || need_apt+=(slurm-wlm)
[ -x /usr/sbin/munged ] || need_apt+=(munge)
command -v podman >/dev/null || need_apt+=(podman)
# The provider protocol's second-language example (examples/python-provider) and
# its test: Debian's Python with gRPC and the stub generator (no PyPI needed).
/usr/bin/python3 -c "import grpc, grpc_tools" 2>/dev/null || need_apt+=(python3-grpcio python3-grpc-tools)

if ((${#need_apt[@]})); then
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  echo "setup: installing ${need_apt[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
