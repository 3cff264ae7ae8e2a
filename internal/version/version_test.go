package version

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The version prints as text and as JSON, with the commit and date set at
// build time; an unknown format is refused.
func TestTheVersionPrintsTheCommitAndDateAsTextOrJSON(t *testing.T) {
	Version, Commit, Date = "v1.2.3", "0123abcd", "2026-11-27T12:00:00Z"
	t.Cleanup(func() { Version, Commit, Date = "dev", "", "" })
	run := func(args ...string) (string, error) {
		cmd := Command("vkubelet")
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	text, err := run()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vkubelet v1.2.3 (Kubernetes " + KubernetesVersion + ")", "commit 0123abcd", "of 2026-11-27T12:00:00Z"} {
		if !strings.Contains(text, want) {
			t.Errorf("text %q lacks %q", text, want)
		}
	}
	js, err := run("-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got Info
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatalf("-o json printed %q: %v", js, err)
	}
	if got.Version != "v1.2.3" || got.Commit != "0123abcd" || got.Date != "2026-11-27T12:00:00Z" || got.Kubernetes != KubernetesVersion || got.Platform == "" {
		t.Errorf("-o json = %+v", got)
	}
	if _, err := run("-o", "yaml"); err == nil {
		t.Error("-o yaml accepted")
	}
}
