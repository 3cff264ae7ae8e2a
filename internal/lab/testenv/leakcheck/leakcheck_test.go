package leakcheck

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// fakeT records failures instead of failing.
type fakeT struct {
	testing.TB
	failed []string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.failed = append(f.failed, format)
}

func TestCountsOnlyOurGoroutinesOutsideTests(t *testing.T) {
	for stack, want := range map[string]bool{
		"goroutine 7 [select]:\ngithub.com/vkubelet/vkubelet/pod.(*Controller).worker(...)\n\t/src/pod/controller.go:260 +0x1\ncreated by github.com/vkubelet/vkubelet/pod.(*Controller).Run\n\t/src/pod/controller.go:241 +0x2":                                                                                                                           true,
		"goroutine 8 [chan receive]:\nk8s.io/client-go/tools/cache.(*Reflector).watch(...)\n\t/mod/reflector.go:1 +0x1":                                                                                                                                                                                                                                    true,
		"goroutine 9 [IO wait]:\nnet/http.(*persistConn).readLoop(0x1)\n\t/go/net/http/transport.go:2000 +0x1\ncreated by github.com/vkubelet/vkubelet/pod.x\n\t/src/pod/x.go:1":                                                                                                                                                                           false,
		"goroutine 10 [select]:\ngithub.com/vkubelet/vkubelet/internal/lab/fault.proxy(...)\n\t/src/internal/lab/fault/proxy_test.go:40 +0x1":                                                                                                                                                                                                              false,
		"goroutine 11 [select]:\ngithub.com/vkubelet/vkubelet/internal/lab/testenv/nodetest.Run.func1()\n\t/src/internal/lab/testenv/nodetest/nodetest.go:35 +0x1":                                                                                                                                                                                         false,
		"goroutine 12 [syscall]:\nos/exec.(*Cmd).Wait(0x1)\n\t/go/os/exec/exec.go:930 +0xb0\ngithub.com/vkubelet/vkubelet/internal/lab/spawn.StartLogged.func1()\n\t/src/internal/lab/spawn/process.go:38 +0x38\ncreated by github.com/vkubelet/vkubelet/internal/lab/spawn.StartLogged in goroutine 2096\n\t/src/internal/lab/spawn/process.go:37 +0x58b": false,
		"goroutine 13 [chan receive]:\ngithub.com/vkubelet/vkubelet/internal/compact/deepstack.serve(0x1)\n\t/src/internal/compact/deepstack/deepstack.go:36 +0x8a\ncreated by github.com/vkubelet/vkubelet/internal/compact/deepstack.init.func1 in goroutine 9\n\t/src/internal/compact/deepstack/deepstack.go:30 +0x9a":                                 false,
	} {
		if got := counts(stack); got != want {
			t.Errorf("counts(%q) = %v, want %v", strings.SplitN(stack, "\n", 3)[1], got, want)
		}
	}
}

func TestFindsALeftListenerAndFileButNotWhatWasClosed(t *testing.T) {
	s := Take()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "leak")
	if err != nil {
		t.Fatal(err)
	}
	ft := &fakeT{TB: t}
	s.Check(ft, 300*time.Millisecond)
	if _, fds := s.leaks(); len(ft.failed) != 1 || len(fds) != 2 {
		t.Fatalf("with a listener and a file open: failures %v, fds %v; want both found", ft.failed, fds)
	}
	l.Close()
	f.Close()
	ft = &fakeT{TB: t}
	s.Check(ft, time.Second)
	if len(ft.failed) != 0 {
		t.Errorf("after closing them: %v", ft.failed)
	}
}
