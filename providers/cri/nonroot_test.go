package cri

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// runAsNonRoot is judged as the kubelet judges it: the container's
// securityContext over the pod's, its runAsUser over the image's user, a user
// name refused as unverifiable, no user at all as root.
func TestRunAsNonRootIsJudgedAsTheKubeletJudgesIt(t *testing.T) {
	pod := func(psc *corev1.PodSecurityContext, csc *corev1.SecurityContext) (*corev1.Pod, *corev1.Container) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1"},
			Spec: corev1.PodSpec{SecurityContext: psc, Containers: []corev1.Container{{Name: "main", SecurityContext: csc}}}}
		return p, &p.Spec.Containers[0]
	}
	nonRoot := &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
	cases := []struct {
		name     string
		psc      *corev1.PodSecurityContext
		csc      *corev1.SecurityContext
		uid      *int64 // the image's
		username string
		want     string // "" allowed; else a part of the error
	}{
		{"not asked", nil, nil, ptr.To(int64(0)), "", ""},
		{"the container lifts the pod's", nonRoot, &corev1.SecurityContext{RunAsNonRoot: ptr.To(false)}, ptr.To(int64(0)), "", ""},
		{"root image", nonRoot, nil, ptr.To(int64(0)), "", `container has runAsNonRoot and image will run as root (pod: "web_ns(u1)", container: main)`},
		{"image names no user", nonRoot, nil, nil, "", "image will run as root"},
		{"non-root image", nonRoot, nil, ptr.To(int64(1234)), "", ""},
		{"image user by name", nonRoot, nil, nil, "nobody", `container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root (pod: "web_ns(u1)", container: main)`},
		{"image uid out of range", nonRoot, nil, ptr.To(int64(1) << 40), "", "invalid user id"},
		{"runAsUser 0", nonRoot, &corev1.SecurityContext{RunAsUser: ptr.To(int64(0))}, ptr.To(int64(1234)), "", `container's runAsUser breaks non-root policy (pod: "web_ns(u1)", container: main)`},
		{"pod's runAsUser 0", &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(0))}, nil, ptr.To(int64(1234)), "", "runAsUser breaks non-root policy"},
		{"runAsUser over a root image", nonRoot, &corev1.SecurityContext{RunAsUser: ptr.To(int64(1000))}, ptr.To(int64(0)), "", ""},
		{"the container asks", nil, &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)}, ptr.To(int64(0)), "", "image will run as root"},
	}
	for _, c := range cases {
		p, ctr := pod(c.psc, c.csc)
		var err error
		if nr, user := effectiveUser(p, ctr); nr && user != nil {
			err = nonRootError(p, ctr, user, "", true)
		} else if nr {
			uid := c.uid
			if uid == nil && c.username == "" {
				uid = new(int64) // as checkRunAsNonRoot takes an image without a user
			}
			err = nonRootError(p, ctr, uid, c.username, false)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
