package controlplane

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// freePort returns a port on ip that nothing listens on, for a component to
// bind once started, and to bind again when a test restarts it.
//
// It is taken below the kernel's ephemeral range when that leaves room: a port
// of that range, found free and released, can be given by the kernel to any
// process's next outgoing connection or ":0" listener before the component
// binds it, or while a test has the component stopped, and on a machine
// running several test packages at once that happens. Below the range only
// another explicit choice can take it.
func freePort(ip string) (int, error) {
	lo, hi := pickRange()
	for i := 0; hi > lo && i < 64; i++ {
		port := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			continue // in use: another
		}
		l.Close()
		return port, nil
	}
	// The range is crowded (or there is none): the kernel's choice.
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("no free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// mustFreePort is freePort on 127.0.0.1, for the control plane's components.
func mustFreePort() int {
	port, err := freePort("127.0.0.1")
	if err != nil {
		panic(fmt.Sprintf("no free loopback port: %v", err))
	}
	return port
}

// pickRange is where freePort picks, [lo, hi): from 10000 up to the ephemeral
// range's start (Linux's default 32768); empty when that starts lower.
func pickRange() (lo, hi int) {
	lo, hi = 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	return lo, hi
}
