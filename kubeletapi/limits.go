package kubeletapi

import (
	"net"
	"sync"
	"time"
)

// Limits of the kubelet port, against clients that hold connections open. The
// probe that found the need: one request then silence kept a goroutine and a file
// descriptor for good (300 held, no end), as no idle timeout was set.
const (
	// DefaultReadHeaderTimeout bounds the TLS handshake and a request's headers:
	// a client that connects and sends nothing (slowloris) is cut after it.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection with no request for this
	// long. The API server, the port's main client, opens a new one when it needs
	// it.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxHeaderBytes bounds a request's headers; the kubelet API's
	// requests carry a token and a path, a few kilobytes at most.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConnsPerClient bounds the connections, streams included, open
	// from one address. All kubectl logs/exec/attach/port-forward sessions come
	// through the API server's address, so the cap is generous.
	DefaultMaxConnsPerClient = 256
	// DefaultMaxConns bounds the connections open in total.
	DefaultMaxConns = 2048
)

// limitListener accepts at most perClient open connections from one remote
// address and total in all; a connection over either cap is closed at once,
// before any TLS work. exec, attach and port-forward streams are hijacked
// connections and count until their stream ends.
type limitListener struct {
	net.Listener
	perClient, total int
	// onRefused, if not nil, is told of each connection closed over a cap.
	onRefused func(remote string)

	mu    sync.Mutex
	byIP  map[string]int
	count int
}

func newLimitListener(l net.Listener, perClient, total int, onRefused func(string)) *limitListener {
	return &limitListener{Listener: l, perClient: perClient, total: total, onRefused: onRefused, byIP: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.mu.Lock()
		over := l.byIP[ip] >= l.perClient || l.count >= l.total
		if !over {
			l.byIP[ip]++
			l.count++
		}
		l.mu.Unlock()
		if over {
			// Counted before the close, so that whoever sees the connection
			// closed also sees it counted.
			if l.onRefused != nil {
				l.onRefused(ip)
			}
			c.Close()
			continue
		}
		return &countedConn{Conn: c, release: func() { l.release(ip) }}, nil
	}
}

func (l *limitListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

// open is the number of connections counted now, for tests.
func (l *limitListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// countedConn gives its place back once, when closed.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
