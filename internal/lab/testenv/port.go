package testenv

import (
	"net"
	"testing"
)

// FreePort is a TCP port free on every address of this machine at the time of
// the call, for a program a test starts that must be told its port.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
