package mock

import (
	"context"
	"encoding/base64"
	"errors"
	"testing"
	"unique"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/provider"
)

func resolvedPod() *provider.ResolvedPod {
	pod := testPod("web", "uid-1")
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "conf", MountPath: "/etc/conf/"},
		{Name: "conf", MountPath: "/etc/one.txt", SubPath: "dir/one.txt"},
	}
	return &provider.ResolvedPod{
		Pod: pod,
		Env: map[string][]corev1.EnvVar{"app": {{Name: "A", Value: "1"}, {Name: "B", Value: "two words"}}},
		Volumes: map[string]*provider.VolumeContents{"conf": {Files: []provider.VolumeFile{
			{Path: "mode", Data: []byte("v1"), Mode: 0o644},
			{Path: "dir/one.txt", Data: []byte("one\n"), Mode: 0o644},
			{Path: "token", Data: []byte(testToken), Mode: 0o644},
		}}},
	}
}

// testToken is shaped like a bound service-account token (a JWT), which the
// mock keeps packed.
var testToken = func() string {
	enc := base64.RawURLEncoding
	sig := make([]byte, 64)
	for i := range sig {
		sig[i] = byte(i * 37)
	}
	return enc.EncodeToString([]byte(`{"alg":"ES256","kid":"k1"}`)) + "." +
		enc.EncodeToString([]byte(`{"aud":["https://kubernetes.default.svc.cluster.local"],"exp":1795669030,"iat":1795665430,`+
			`"iss":"https://kubernetes.default.svc.cluster.local","jti":"0af44087-cff3-4d78-ac11-b4416c3ff0f2",`+
			`"kubernetes.io":{"namespace":"default","pod":{"name":"web","uid":"uid-1"},"serviceaccount":{"name":"default",`+
			`"uid":"8dcad5e1-8fad-4e05-9d9c-2f27aa3f37fb"}},"nbf":1795665430,"sub":"system:serviceaccount:default:default"}`)) + "." +
		enc.EncodeToString(sig)
}()

func exec(t *testing.T, p *Provider, cmd ...string) (string, error) {
	t.Helper()
	out := &testenv.Buffer{}
	err := p.RunInContainer(context.Background(), "default", "web", "app", cmd, &fakeAttach{stdout: out})
	return out.String(), err
}

func TestResolvedPodIsKeptAndShownByExec(t *testing.T) {
	p, clk := newTestProvider(t, Config{})
	ctx := context.Background()
	if err := p.CreateResolvedPod(ctx, resolvedPod()); err != nil {
		t.Fatal(err)
	}
	clk.Step(waitTimeout) // running
	if got := p.Resolved("default", "web"); got == nil || got.Env["app"][1].Value != "two words" {
		t.Fatalf("Resolved = %+v", got)
	}
	for _, tt := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"env"}, "A=1\nB=two words\n"},
		{[]string{"cat", "/etc/conf/mode"}, "v1"},
		{[]string{"cat", "/etc/conf/dir/one.txt"}, "one\n"},
		{[]string{"cat", "/etc/one.txt"}, "one\n"},
		{[]string{"cat", "/etc/conf/token"}, testToken},
		{[]string{"echo", "hi"}, "echo hi\n"},
	} {
		if got, err := exec(t, p, tt.cmd...); err != nil || got != tt.want {
			t.Errorf("exec %q = %q, %v; want %q", tt.cmd, got, err, tt.want)
		}
	}
	if v := p.pods["default/web"].resolution.volumes[0]; len(v.tokens) != 1 || v.tokens[0].Size() > len(testToken)/2 {
		t.Errorf("the volume keeps %d tokens (want 1, the token file of %d bytes packed to under half)", len(v.tokens), len(testToken))
	}
	// A second pod with the same files but its token shares their layout; one
	// whose files differ has its own.
	twin := resolvedPod()
	twin.Pod = testPod("twin", "uid-2")
	other := resolvedPod()
	other.Pod = testPod("other", "uid-3")
	other.Volumes["conf"].Files[0].Data = []byte("v2")
	for _, rp := range []*provider.ResolvedPod{twin, other} {
		if err := p.CreateResolvedPod(context.Background(), rp); err != nil {
			t.Fatal(err)
		}
	}
	layout := func(name string) unique.Handle[string] { return p.pods["default/"+name].resolution.volumes[0].layout }
	if layout("twin") != layout("web") {
		t.Error("two pods with the same volume files but the token keep a layout each")
	}
	if layout("other") == layout("web") {
		t.Error("pods whose volume files differ share a layout")
	}
	if got := p.Resolved("default", "other").Volumes["conf"].Files; len(got) != 3 || string(got[0].Data) != "v2" || got[0].Mode != 0o644 || got[2].Path != "token" || string(got[2].Data) != testToken {
		t.Errorf("the other pod's files read back as %+v", got)
	}
	// A volume the spec names is kept by its index there, not by a copy of
	// its name; one it does not (the pods above) by its name.
	named := resolvedPod()
	named.Pod = testPod("named", "uid-4")
	named.Pod.Spec.Volumes = []corev1.Volume{{Name: "other"}, {Name: "conf"}}
	if err := p.CreateResolvedPod(context.Background(), named); err != nil {
		t.Fatal(err)
	}
	if v := p.pods["default/named"].resolution.volumes[0]; v.index != 1 || p.pods["default/web"].resolution.volumes[0].index != -1 {
		t.Errorf("volume indexes %d and %d, want 1 for the spec's volume and -1 for the other", v.index, p.pods["default/web"].resolution.volumes[0].index)
	}
	if got := p.Resolved("default", "named").Volumes["conf"]; got == nil || len(got.Files) != 3 || string(got.Files[2].Data) != testToken {
		t.Errorf("the named volume reads back as %+v", got)
	}
	out, err := exec(t, p, "cat", "/etc/conf/nope")
	var exitErr *provider.ExecError
	if !errors.As(err, &exitErr) || exitErr.ExitCode != 1 || out != "cat: /etc/conf/nope: No such file or directory\n" {
		t.Errorf("cat of a missing file = %q, %v; want exit code 1 and an error", out, err)
	}
}

func TestUpdatePodVolumesReplacesFilesOnly(t *testing.T) {
	p, clk := newTestProvider(t, Config{})
	ctx := context.Background()
	rp := resolvedPod()
	if err := p.CreateResolvedPod(ctx, rp); err != nil {
		t.Fatal(err)
	}
	clk.Step(waitTimeout)
	update := resolvedPod()
	update.Env = nil
	update.Volumes["conf"].Files[0].Data = []byte("v2")
	if err := p.UpdatePodVolumes(ctx, update); err != nil {
		t.Fatal(err)
	}
	if got, _ := exec(t, p, "cat", "/etc/conf/mode"); got != "v2" {
		t.Errorf("mode after the update = %q, want v2", got)
	}
	if got, _ := exec(t, p, "env"); got != "A=1\nB=two words\n" {
		t.Errorf("env after a volume update = %q, want it unchanged", got)
	}
	if n := p.VolumeUpdates("default", "web"); n != 1 {
		t.Errorf("VolumeUpdates = %d, want 1", n)
	}
	other := resolvedPod()
	other.Pod.UID = "uid-2"
	if err := p.UpdatePodVolumes(ctx, other); err == nil {
		t.Error("UpdatePodVolumes of another incarnation succeeded")
	}
}
