package slurm_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/pod"
	"github.com/vkubelet/vkubelet/providers/slurm"
)

// A StatefulSet's pod deleted while the runtime is still starting its
// container (runc has started it but is slow to return to podman: held until
// the pod's grace period is over, so that the pod stays Terminating past it,
// with the StopNotConfirmed Event) is replaced only once its job has ended
// with its container, which ignores SIGTERM: the provider has the script kill
// it once the grace period of 30 s is over. Read every 50 ms all along (squeue
// for RUNNING and COMPLETING jobs, /proc for the containers, which podman runs
// outside the job), two db-0 pods never run at once. (A deletion that
// signalled every process of the job would kill the podman start in flight: the
// script, taking the container for not started, would end the job at once, and
// the replacement would run beside the container. A job cancelled outright past
// its grace period would end after Slurm's KillWait whether or not podman had
// stopped the container. Either fails this test.)
func TestAStatefulSetsPodIsNeverRunTwiceAsSlurmJobs(t *testing.T) {
	cl := startCluster(t)
	const node = "slurm-at-most-one"
	ns := testenv.Namespace(t)
	runc := slowStartingRuntime(t)
	cl.runNodeWith(t, node, func(cfg *slurm.Config) {
		cfg.Podman = append(cfg.Podman, "--runtime="+runc.path)
	})
	watch := cl.watchCopies(t)

	spec := corev1.PodSpec{
		// Bound by the template: the package's control plane runs no scheduler.
		NodeName:                      node,
		TerminationGracePeriodSeconds: ptr.To[int64](30),
		Containers: []corev1.Container{{
			Name: "db", Image: cl.image,
			// Deaf to SIGTERM: only podman's SIGKILL stops it.
			Command: []string{"/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done"},
		}},
	}
	hold := func(old types.UID) {
		// db-0 is Running in the API once its script is about to start it.
		testenv.Eventually(t, 3*time.Minute, func() (bool, string) {
			return runc.holding(), "runc has not started db-0's container yet"
		})
		held := time.Now()
		testenv.ReleaseWhen(t, 3*time.Minute, func() (bool, string) {
			reasons := testenv.EventReasons(t, ns, old)
			return slices.Contains(reasons, pod.ReasonStopNotConfirmed),
				fmt.Sprintf("events of the old pod: %v, want a %s", reasons, pod.ReasonStopNotConfirmed)
		}, func(ok bool) {
			if ok {
				if uids := watch.Seen(); !slices.Equal(uids, []types.UID{old}) {
					t.Errorf("with the old db-0 still starting, pods %v ran, want only %s", uids, old)
				}
				t.Logf("runc returned to podman %s after it started the old db-0", time.Since(held).Round(time.Millisecond))
			}
			runc.release(t)
		})
	}
	old, replacement := testenv.ReplaceStatefulSetPod(t, ns, node, spec, hold)
	watch.Stop(t, replacement)
	if n := watch.Overlapping(); n != 0 {
		t.Fatalf("%d pods named db-0 ran beside an earlier copy, want none (%s)", n, watch)
	}
	t.Logf("replacement %s ran only after the old pod %s had stopped (%s)", replacement, old, watch)
}

// runNodeWith runs a node of the cluster, as runNode, with the provider's
// configuration edited.
func (c *cluster) runNodeWith(t *testing.T, name string, edit func(*slurm.Config)) {
	t.Helper()
	b, err := os.ReadFile(c.cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg slurm.Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	edit(&cfg)
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	edited := *c
	edited.cfgFile = filepath.Join(t.TempDir(), "slurm.json")
	if err := os.WriteFile(edited.cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	edited.runNode(t, name)
}

// watchCopies watches which pods run on the cluster (testenv.WatchCopies): a
// pod runs while its job is RUNNING or COMPLETING in squeue, and while one of
// its containers runs, with or without the job: podman's containers are not the
// job's processes.
func (c *cluster) watchCopies(t *testing.T) *testenv.Copies {
	return testenv.WatchCopies(t, func() ([]types.UID, error) {
		cmd := exec.Command("squeue", "--noheader", "--states=all", "--format=%j|%T")
		cmd.Env = c.env.Environ()
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("squeue: %w", err)
		}
		var uids []types.UID
		for _, line := range strings.Split(string(out), "\n") {
			name, state, _ := strings.Cut(strings.TrimSpace(line), "|")
			if state == "RUNNING" || state == "COMPLETING" {
				uids = append(uids, types.UID(name)) // a pod's job is named after its UID
			}
		}
		return append(uids, conmonPods()...), nil
	})
}

// conmonPods are the pods with a container running here: a conmon (podman
// names a pod's container vk-<pod UID>-<container>) with a live child, the
// container's first process.
func conmonPods() []types.UID {
	conmons := map[string]types.UID{} // by pid
	parents := map[string]string{}    // the parents of live processes, by pid
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		pid := filepath.Base(filepath.Dir(f))
		if b, err := os.ReadFile(f); err == nil {
			// pid (comm) state ppid ...: comm may hold spaces and parentheses.
			if i := strings.LastIndexByte(string(b), ')'); i > 0 {
				if fields := strings.Fields(string(b[i+1:])); len(fields) > 1 && fields[0] != "Z" {
					parents[pid] = fields[1]
				}
			}
		}
		b, err := os.ReadFile(filepath.Join(filepath.Dir(f), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		if filepath.Base(argv[0]) != "conmon" {
			continue
		}
		if i := slices.Index(argv, "-n"); i >= 0 && i+1 < len(argv) && strings.HasPrefix(argv[i+1], "vk-") && len(argv[i+1]) > len("vk-")+36 {
			conmons[pid] = types.UID(argv[i+1][len("vk-") : len("vk-")+36])
		}
	}
	var uids []types.UID
	for _, ppid := range parents {
		if uid, ok := conmons[ppid]; ok {
			uids = append(uids, uid)
		}
	}
	return uids
}

// slowRuntime is an OCI runtime for podman (--runtime) that is slow to start the
// first container: runc starts it, then the wrapper holds podman's `runc start`
// until release. Later containers start at once.
type slowRuntime struct {
	path, dir string
}

func slowStartingRuntime(t *testing.T) *slowRuntime {
	t.Helper()
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skipf("runc: %v", err)
	}
	dir := t.TempDir()
	r := &slowRuntime{path: filepath.Join(dir, "runc"), dir: dir}
	script := fmt.Sprintf(`#!/bin/sh
# runc, slow to return from the first start: whoever takes the hold file says
# so in held and waits for release.
%s "$@" || exit
case " $* " in
*" start "*)
	if rm %s 2>/dev/null; then
		touch %s
		until [ -e %s ]; do sleep 0.1; done
	fi ;;
esac
`, runc, filepath.Join(dir, "hold"), filepath.Join(dir, "held"), filepath.Join(dir, "release"))
	if err := os.WriteFile(r.path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hold"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.release(t) })
	return r
}

// holding tells whether runc has started the first container and holds it.
func (r *slowRuntime) holding() bool {
	_, err := os.Stat(filepath.Join(r.dir, "held"))
	return err == nil
}

// release lets the held start return.
func (r *slowRuntime) release(t *testing.T) {
	if err := os.WriteFile(filepath.Join(r.dir, "release"), nil, 0o644); err != nil {
		t.Error(err)
	}
}
