package interlink

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// fuzzPod is the pod the fuzzed answers are about: two containers, one init.
var fuzzPod = &corev1.Pod{Spec: corev1.PodSpec{
	InitContainers: []corev1.Container{{Name: "init"}},
	Containers:     []corev1.Container{{Name: "a"}, {Name: "b"}},
}}

// FuzzStatusAnswer feeds a plugin's /status answer, as bytes from the network,
// through the decoding and the phase rules: a malformed answer is an error or
// is ignored, never a panic, and an accepted one never claims more than its
// containers say (Succeeded only if every container of the pod exited 0).
func FuzzStatusAnswer(f *testing.F) {
	for _, seed := range []string{
		`[{"name":"p","UID":"u","namespace":"ns","JID":"1","containers":[{"name":"a","state":{"running":{}}},{"name":"b","state":{"running":{}}}]}]`,
		`[{"name":"p","UID":"u","containers":[{"name":"a","state":{"terminated":{"exitCode":0}}},{"name":"b","state":{"terminated":{"exitCode":0}}}]}]`,
		`[{"name":"p","UID":"u","containers":[{"name":"a","state":{"terminated":{"exitCode":0}}},{"name":"a","state":{"terminated":{"exitCode":0}}}]}]`,
		`[{"name":"p","UID":"u","containers":[{"name":"a","state":{"terminated":{"exitCode":3}}},{"name":"b","state":{"running":{}}}]}]`,
		`[{"name":"p","UID":"u","containers":[{"name":"c","state":{"terminated":{"exitCode":0}}}],"initContainers":[{"name":"init"}]}]`,
		`[]`, `null`, `{"name":1}`, `[{"containers":null}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		var statuses []podStatus
		if err := json.Unmarshal(answer, &statuses); err != nil {
			return // do() reports it as a decoding error
		}
		for _, st := range statuses {
			out, err := podPhase(fuzzPod, st, nil)
			if err != nil {
				continue
			}
			byName := map[string]corev1.ContainerStatus{}
			for _, c := range out.ContainerStatuses {
				byName[c.Name] = c
			}
			exitedZero, terminated, running := 0, 0, 0
			for _, c := range fuzzPod.Spec.Containers {
				s, ok := byName[c.Name]
				switch {
				case !ok:
				case s.State.Terminated != nil:
					terminated++
					if s.State.Terminated.ExitCode == 0 {
						exitedZero++
					}
				case s.State.Running != nil:
					running++
				}
			}
			n := len(fuzzPod.Spec.Containers)
			switch out.Phase {
			case corev1.PodSucceeded:
				if exitedZero != n {
					t.Fatalf("Succeeded with %d of %d containers exited 0: %s", exitedZero, n, answer)
				}
			case corev1.PodFailed:
				if terminated != n || exitedZero == n {
					t.Fatalf("Failed with %d of %d containers terminated, %d exited 0: %s", terminated, n, exitedZero, answer)
				}
			case corev1.PodRunning:
				if running == 0 {
					t.Fatalf("Running with no container running: %s", answer)
				}
			}
			for _, c := range out.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && running != n {
					t.Fatalf("Ready with %d of %d containers running: %s", running, n, answer)
				}
			}
		}
	})
}
