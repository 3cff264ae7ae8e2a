package slurm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/crienv"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/provider"
)

// podmanAvailable says why podman cannot run the tests' containers here, or
// nil: its rootful mode needs root. (slurmenv.PodmanAvailable, for the tests
// of other packages; this package's own cannot import slurmenv, which imports it.)
func podmanAvailable() error {
	if os.Geteuid() != 0 {
		return errors.New("podman's rootful mode needs root")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		return fmt.Errorf("podman not found (scripts/setup.sh --slurm installs it): %w", err)
	}
	return nil
}

// testPodman is podman with storage of the test's own, so that tests running at
// the same time do not share containers or images.
func testPodman(t *testing.T) []string {
	t.Helper()
	testenv.Require(t, podmanAvailable())
	// podman refuses a run root longer than 50 characters: t.TempDir's are.
	dir, err := os.MkdirTemp("/tmp", "pm")
	if err != nil {
		t.Fatal(err)
	}
	podman := []string{"podman", "--root=" + filepath.Join(dir, "root"), "--runroot=" + filepath.Join(dir, "run"),
		"--storage-driver=vfs", "--cgroup-manager=cgroupfs", "--events-backend=file"}
	t.Cleanup(func() {
		_ = exec.Command(podman[0], append(podman[1:], "rm", "--force", "--all", "--time=0")...).Run()
		_ = crienv.RemoveAllMounted(dir)
	})
	return podman
}

func testRegistry(t *testing.T) *crienv.Env {
	t.Helper()
	reg, err := crienv.StartRegistry()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	return reg
}

// The job script on its own, run by sh as slurmd would run it: init containers in
// turn, then the app containers side by side, environment and volumes across,
// exit codes recorded; SIGTERM stops the containers and the script.
func TestTheJobScriptRunsThePodWithPodman(t *testing.T) {
	podman := testPodman(t)
	reg := testRegistry(t)
	dir := filepath.Join(t.TempDir(), "pod")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "script-test"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			InitContainers: []corev1.Container{{Name: "init", Image: reg.Busybox, Command: []string{"sh", "-c", "echo from-init > /scratch/x"},
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
			Containers: []corev1.Container{
				{Name: "reader", Image: reg.Busybox, Command: []string{"sh", "-c", "cat /scratch/x /cfg/key; echo $(GREETING) $GREETING; exit 3"},
					VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "cfg", MountPath: "/cfg"}}},
				{Name: "sleeper", Image: reg.Busybox, Command: []string{"sh", "-c", "trap 'echo bye; exit 0' TERM; while :; do sleep 1; done"}},
			},
		},
	}
	rp := &provider.ResolvedPod{Pod: pod,
		Env:     map[string][]corev1.EnvVar{"reader": {{Name: "GREETING", Value: "hello there"}}},
		Volumes: map[string]*provider.VolumeContents{"cfg": {Files: []provider.VolumeFile{{Path: "key", Data: []byte("value\n")}}}},
	}
	script, err := jobScript(rp, scriptOptions{dir: dir, podman: podman, insecure: []string{reg.Registry}, createFlags: TestCreateFlags})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeVolumes(dir, rp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, scriptFile), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", filepath.Join(dir, scriptFile))
	out, err := os.Create(filepath.Join(dir, jobOutFile))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitDone := make(chan error, 1)
	go func() { waitDone <- cmd.Wait() }()

	// The reader exits 3; the sleeper runs until the script is told to stop.
	deadline := time.Now().Add(90 * time.Second)
	for {
		reader, sleeper := readInstances(dir, "reader"), readInstances(dir, "sleeper")
		if len(reader) == 1 && reader[0].exited && len(sleeper) == 1 && !sleeper[0].started.IsZero() {
			if reader[0].exitCode != 3 {
				log, _ := os.ReadFile(filepath.Join(dir, containerDir, "reader", "0", "log"))
				job, _ := os.ReadFile(filepath.Join(dir, jobOutFile))
				t.Fatalf("reader exit code %d; its log:\n%s\njob output:\n%s", reader[0].exitCode, log, job)
			}
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, jobOutFile))
			init := readInstances(dir, "init")
			ls, _ := exec.Command("find", dir).Output()
			t.Fatalf("containers did not run: init %+v reader %+v sleeper %+v\njob output:\n%s\n%s", init, reader, sleeper, b, ls)
		}
		time.Sleep(200 * time.Millisecond)
	}
	log, err := os.ReadFile(filepath.Join(dir, containerDir, "reader", "0", "log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stdout F from-init", "stdout F value", "stdout F hello there hello there"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("reader's log lacks %q:\n%s", want, log)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, stoppingFile), []byte("5"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-waitDone:
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			t.Errorf("script exit code %d (%v), want 1: one container failed", code, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the script did not end after SIGTERM")
	}
	sleeper := readInstances(dir, "sleeper")
	if len(sleeper) != 1 || !sleeper[0].exited || sleeper[0].exitCode != 0 {
		t.Errorf("sleeper after SIGTERM: %+v (its trap exits 0)", sleeper)
	}
	if b, _ := exec.Command(podman[0], append(podman[1:], "ps", "-a", "--format={{.Names}}")...).Output(); strings.Contains(string(b), "script-test") {
		t.Errorf("containers left behind: %s", b)
	}
}
