package skew

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
)

// The chart's kubeVersion, the README and docs/COMPATIBILITY.md name exactly the
// releases the matrix tests: those the lab builds.
func TestTheSupportedRangeIsTheTestedOne(t *testing.T) {
	versions := controlplane.KubernetesVersions()
	oldest, err := controlplane.MinorOf(versions[0])
	if err != nil {
		t.Fatal(err)
	}
	newest, err := controlplane.MinorOf(versions[len(versions)-1])
	if err != nil {
		t.Fatal(err)
	}
	if apifeatures.Floor != oldest {
		t.Errorf("the node refuses API servers below v1.%d (apifeatures.Floor), the oldest release tested is %s", apifeatures.Floor, versions[0])
	}
	repo := filepath.Join("..", "..", "..")
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join(repo, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	chart := regexp.MustCompile(`(?m)^kubeVersion: "(.*)"$`).FindStringSubmatch(read("charts/vkubelet/Chart.yaml"))
	if want := fmt.Sprintf(">=1.%d.0-0 <1.%d.0-0", oldest, newest+1); chart == nil || chart[1] != want {
		t.Errorf("charts/vkubelet/Chart.yaml: kubeVersion %q, want %q", chart, want)
	}
	phrase := fmt.Sprintf("Kubernetes 1.%d to 1.%d", oldest, newest)
	for _, doc := range []string{"README.md", "docs/COMPATIBILITY.md", "docs/DEPLOYING.md"} {
		if !strings.Contains(read(doc), phrase) {
			t.Errorf("%s does not say %q", doc, phrase)
		}
	}
	for _, v := range versions {
		if !strings.Contains(read("docs/COMPATIBILITY.md"), "| "+v+" |") {
			t.Errorf("docs/COMPATIBILITY.md has no matrix row for %s", v)
		}
	}
}
