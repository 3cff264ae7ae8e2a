package upstreammock

import (
	"io/fs"
	"testing"
)

// Each program Build knows has its embedded main, and each embedded main is a
// program Build knows.
func TestEveryProgramHasAMainAndASource(t *testing.T) {
	for p := range sources {
		if _, err := programs.ReadFile("programs/" + string(p) + "/main.go.txt"); err != nil {
			t.Errorf("program %s: %v", p, err)
		}
	}
	dirs, err := fs.ReadDir(programs, "programs")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if _, ok := sources[Program(d.Name())]; !ok {
			t.Errorf("programs/%s has no entry in sources", d.Name())
		}
	}
}
