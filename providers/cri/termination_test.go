package cri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// exitedStatus is the status of an exited container whose termination message file
// holds file and whose CRI log holds the lines of log.
func exitedStatus(t *testing.T, policy corev1.TerminationMessagePolicy, exitCode int32, file string, log []string) *runtimeapi.ContainerStatus {
	t.Helper()
	dir := t.TempDir()
	msgFile := filepath.Join(dir, "0-abc")
	if err := os.WriteFile(msgFile, []byte(file), 0o666); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range log {
		fmt.Fprintf(&b, "2024-05-01T10:00:00.000000000Z stdout F %s\n", l)
	}
	logFile := filepath.Join(dir, "0.log")
	if err := os.WriteFile(logFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return &runtimeapi.ContainerStatus{
		State:    runtimeapi.ContainerState_CONTAINER_EXITED,
		ExitCode: exitCode,
		LogPath:  logFile,
		Mounts:   []*runtimeapi.Mount{{ContainerPath: "/dev/termination-log", HostPath: msgFile}},
		Annotations: map[string]string{
			annotationTerminationPath:   "/dev/termination-log",
			annotationTerminationPolicy: string(policy),
		},
	}
}

func TestTerminationMessage(t *testing.T) {
	lines := func(n int, format string) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf(format, i))
		}
		return out
	}
	big := strings.Repeat("x", 5000) + "END"
	cases := []struct {
		name     string
		policy   corev1.TerminationMessagePolicy
		exitCode int32
		file     string
		log      []string
		want     string
	}{
		{"the file's content", corev1.TerminationMessageReadFile, 3, "bye", []string{"out"}, "bye"},
		{"the file's last 4096 bytes", corev1.TerminationMessageReadFile, 0, big, nil, big[len(big)-4096:]},
		{"File: no log even on failure", corev1.TerminationMessageReadFile, 1, "", []string{"out"}, ""},
		{"FallbackToLogsOnError: the file first", corev1.TerminationMessageFallbackToLogsOnError, 1, "bye", []string{"out"}, "bye"},
		{"FallbackToLogsOnError: the log when the file is empty", corev1.TerminationMessageFallbackToLogsOnError, 1, "", []string{"one", "two"}, "one\ntwo\n"},
		{"FallbackToLogsOnError: no log on success", corev1.TerminationMessageFallbackToLogsOnError, 0, "", []string{"out"}, ""},
		{"FallbackToLogsOnError: the last 80 lines", corev1.TerminationMessageFallbackToLogsOnError, 1, "", lines(100, "l%d"),
			strings.Join(lines(100, "l%d")[20:], "\n") + "\n"},
		{"FallbackToLogsOnError: the last 2048 bytes of them", corev1.TerminationMessageFallbackToLogsOnError, 2, "", lines(80, "%02d"+strings.Repeat("y", 97)),
			(strings.Join(lines(80, "%02d"+strings.Repeat("y", 97)), "\n") + "\n")[80*100-2048:]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := exitedStatus(t, c.policy, c.exitCode, c.file, c.log)
			addTerminationMessage(context.Background(), st)
			if st.Message != c.want {
				t.Errorf("message = %q (%d bytes), want %q (%d bytes)", st.Message, len(st.Message), c.want, len(c.want))
			}
		})
	}
}

func TestTerminationMessageFollowsTheRuntimesMessage(t *testing.T) {
	st := exitedStatus(t, corev1.TerminationMessageReadFile, 137, "bye", nil)
	st.Message = "killed"
	addTerminationMessage(context.Background(), st)
	if st.Message != "killed: bye" {
		t.Errorf("message = %q", st.Message)
	}
	running := exitedStatus(t, corev1.TerminationMessageReadFile, 0, "bye", nil)
	running.State = runtimeapi.ContainerState_CONTAINER_RUNNING
	addTerminationMessage(context.Background(), running)
	if running.Message != "" {
		t.Errorf("a running container got the message %q", running.Message)
	}
}

// Against containerd: what a container (here not root) writes to
// /dev/termination-log is its terminated state's message; each instance starts
// with an empty file and the message of the one before is in lastState; with
// FallbackToLogsOnError a failed container with nothing in the file gets the end
// of its log.
func TestTerminationMessages(t *testing.T) {
	needRuntime(t)
	p, _ := newProvider(t, testConfig(t))
	ctx := context.Background()

	bye := busyboxPod("bye", "printf bye > /dev/termination-log; exit 3")
	bye.Spec.RestartPolicy = corev1.RestartPolicyNever
	bye.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To(int64(65534))}
	// Both lines to stdout: stdout and stderr are copied to the log apart, in no
	// set order.
	logs := busyboxPod("logs", "echo first; echo last; exit 1")
	logs.Spec.RestartPolicy = corev1.RestartPolicyNever
	logs.Spec.Containers[0].TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	again := busyboxPod("again", `printf "seen:[$(cat /dev/termination-log)]" > /dev/termination-log; exit 2`)
	for _, pod := range []*corev1.Pod{bye, logs, again} {
		if err := p.CreatePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	for pod, want := range map[*corev1.Pod]string{bye: "bye", logs: "first\nlast\n"} {
		st := waitStatus(t, p, pod, 60*time.Second, "Failed", func(s *corev1.PodStatus) bool { return s.Phase == corev1.PodFailed })
		term := st.ContainerStatuses[0].State.Terminated
		if term == nil || term.Message != want {
			t.Errorf("%s: terminated state %+v, want the message %q", pod.Name, term, want)
		}
	}
	st := waitStatus(t, p, again, 60*time.Second, "a restart", func(s *corev1.PodStatus) bool {
		return s.ContainerStatuses[0].RestartCount >= 1 && s.ContainerStatuses[0].LastTerminationState.Terminated != nil
	})
	if last := st.ContainerStatuses[0].LastTerminationState.Terminated; last.Message != "seen:[]" || last.ExitCode != 2 {
		t.Errorf("lastState.terminated = %+v, want exit code 2 and the message %q", last, "seen:[]")
	}
}
