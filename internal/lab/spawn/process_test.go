package spawn

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/eventually"
)

// A logged process writes to its log, runs until stopped (SIGKILL after the grace
// when it ignores SIGTERM), and its log's tail is there for messages.
func TestStartLoggedStopAndTail(t *testing.T) {
	var none *Process
	if none.Running() {
		t.Fatal("a nil Process runs")
	}
	none.Stop(time.Second) // no panic

	log := filepath.Join(t.TempDir(), "p.log")
	p, err := StartLogged("p", log, exec.Command("sh", "-c", `trap "" TERM; echo one; echo two; echo three; while :; do sleep 0.1; done`))
	if err != nil {
		t.Fatal(err)
	}
	eventually.TrueEvery(t, 5*time.Second, 20*time.Millisecond, func() (bool, string) {
		got := p.Tail(2)
		return got == "two\nthree", fmt.Sprintf("Tail(2) = %q", got)
	})
	if !p.Running() {
		t.Fatal("not running")
	}
	start := time.Now()
	p.Stop(300 * time.Millisecond)
	if p.Running() || p.Err() == nil {
		t.Fatalf("after Stop: running %v, err %v", p.Running(), p.Err())
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("stopped after %s, before the grace (it ignores SIGTERM)", d)
	}
}
