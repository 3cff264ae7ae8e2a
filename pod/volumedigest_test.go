package pod

import (
	"testing"

	"github.com/vkubelet/vkubelet/provider"
)

func TestDigestVolumes(t *testing.T) {
	files := func(data string, mode int32) map[string]*provider.VolumeContents {
		return map[string]*provider.VolumeContents{
			"token": {Files: []provider.VolumeFile{{Path: "token", Data: []byte(data), Mode: mode}, {Path: "ca.crt", Data: []byte("ca")}}},
			"cfg":   {Files: []provider.VolumeFile{{Path: "a", Data: []byte("1")}}},
		}
	}
	base := digestVolumes(files("t1", 0o644))
	if base == (volumesDigest{}) {
		t.Fatal("volumes with files have the zero digest")
	}
	if got := digestVolumes(files("t1", 0o644)); got != base {
		t.Error("equal files, different digests")
	}
	for name, other := range map[string]map[string]*provider.VolumeContents{
		"data":           files("t2", 0o644),
		"mode":           files("t1", 0o600),
		"volume":         {"token": files("t1", 0o644)["token"]},
		"renamed volume": {"token2": files("t1", 0o644)["token"], "cfg": files("t1", 0o644)["cfg"]},
		// Moving a byte from a path to the data must not give the same stream.
		"shifted": {
			"token": {Files: []provider.VolumeFile{{Path: "tokent", Data: []byte("1"), Mode: 0o644}, {Path: "ca.crt", Data: []byte("ca")}}},
			"cfg":   {Files: []provider.VolumeFile{{Path: "a", Data: []byte("1")}}},
		},
	} {
		if digestVolumes(other) == base {
			t.Errorf("%s changed, digest did not", name)
		}
	}
	if digestVolumes(nil) != (volumesDigest{}) || digestVolumes(map[string]*provider.VolumeContents{}) != (volumesDigest{}) {
		t.Error("no volumes should have the zero digest")
	}
	if digestVolumes(map[string]*provider.VolumeContents{"a": nil}) != digestVolumes(map[string]*provider.VolumeContents{"a": {}}) {
		t.Error("a nil VolumeContents differs from an empty one")
	}
}
