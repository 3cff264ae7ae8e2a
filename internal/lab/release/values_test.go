package release

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The released chart's values name the image pushed with it and keep the rest
// of the chart's values, comments included.
func TestTheReleasedChartNamesTheReleasedImage(t *testing.T) {
	values, err := os.ReadFile("../../../charts/vkubelet/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := withImageRepository(values, "127.0.0.1:5000/vk/vkubelet")
	if err != nil {
		t.Fatal(err)
	}
	var before, after map[string]any
	if err := yaml.Unmarshal(values, &before); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(got, &after); err != nil {
		t.Fatal(err)
	}
	if repo := after["image"].(map[string]any)["repository"]; repo != "127.0.0.1:5000/vk/vkubelet" {
		t.Errorf("image.repository = %v", repo)
	}
	after["image"].(map[string]any)["repository"] = before["image"].(map[string]any)["repository"]
	b1, _ := yaml.Marshal(before)
	b2, _ := yaml.Marshal(after)
	if string(b1) != string(b2) {
		t.Errorf("values other than image.repository changed:\n%s\n---\n%s", b1, b2)
	}
	if strings.Count(string(got), "\n#") != strings.Count(string(values), "\n#") {
		t.Error("comments were lost")
	}

	for _, bad := range []string{"image:\n  tag: x\nother:\n  repository: y\n", "images:\n  repository: y\n"} {
		if _, err := withImageRepository([]byte(bad), "r"); err == nil {
			t.Errorf("values without image.repository (%q) were accepted", bad)
		}
	}
}
