#!/usr/bin/env bash
# Installs, from Debian's packages, what the chosen use of vkubelet needs on a
# fresh Debian machine. Idempotent: it installs only what is missing. The
# control-plane binaries are not installed here: vkubeletctl builds and caches
# them on first use.
#
#   scripts/setup.sh            build, `make up` with the mock provider
#   scripts/setup.sh --test     and the tests' race detector: gcc
#   scripts/setup.sh --cri      and the CRI provider: containerd, runc, CNI plugins
#   scripts/setup.sh --slurm    and the Slurm provider: Slurm, munge, podman
#   scripts/setup.sh --python   and the Python example provider: Python's gRPC
#   scripts/setup.sh --all      all of them, as `make test` needs to run every test
#
# Options combine (--cri --python). `make test` asks for --all when it runs as
# root or in CI (CI=true), --test otherwise: the tests whose parts are missing
# then skip, each saying what it needs.
set -euo pipefail

test=false cri=false slurm=false python=false
for arg in "$@"; do
  case "$arg" in
    --test) test=true ;;
    --cri) cri=true ;;
    --slurm) slurm=true ;;
    --python) python=true ;;
    --all) test=true cri=true slurm=true python=true ;;
    *) echo "setup: unknown option $arg (--test, --cri, --slurm, --python, --all)" >&2; exit 2 ;;
  esac
done

need_apt=()
command -v go >/dev/null || { echo "setup: Go is required (https://go.dev/doc/install); the Debian package is too old" >&2; exit 1; }
command -v git >/dev/null || need_apt+=(git)
command -v make >/dev/null || need_apt+=(make)
$test && { command -v gcc >/dev/null || need_apt+=(gcc); }   # the race detector needs cgo
# `vkubeletctl up` as root gives the node an address of its own in a network
# namespace, made with iproute2's ip.
command -v ip >/dev/null || [ -x /usr/sbin/ip ] || need_apt+=(iproute2)
if $cri || $slurm; then
  # The CRI provider (providers/cri) and its tests run real containers: containerd
  # with runc, a busybox-static rootfs for the test images (the Slurm tests' images
  # too), CNI plugins for pod networks.
  command -v containerd >/dev/null || need_apt+=(containerd)
  command -v runc >/dev/null || [ -x /usr/sbin/runc ] || need_apt+=(runc)
  dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" || need_apt+=(busybox-static)
  [ -x /usr/lib/cni/bridge ] || need_apt+=(containernetworking-plugins)
  command -v iptables >/dev/null || [ -x /usr/sbin/iptables ] || need_apt+=(iptables)
fi
if $slurm; then
  # The Slurm provider (providers/slurm) and its tests run a private Slurm cluster
  # (internal/lab/slurmenv): slurmctld, slurmd and the client commands, munge for
  # their authentication, and podman, which runs the pods' containers inside the jobs.
  { [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v sbatch >/dev/null; } || need_apt+=(slurm-wlm)
  [ -x /usr/sbin/munged ] || need_apt+=(munge)
  command -v podman >/dev/null || need_apt+=(podman)
fi
if $python; then
  # The provider protocol's second-language example (examples/python-provider) and
  # its test: Debian's Python with gRPC and the stub generator (no PyPI needed).
  /usr/bin/python3 -c "import grpc, grpc_tools" 2>/dev/null || need_apt+=(python3-grpcio python3-grpc-tools)
fi

if ((${#need_apt[@]})); then
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  echo "setup: installing ${need_apt[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
