package fault_test

import (
	"net"
	"sync"
	"testing"
)

// partitionProxy forwards TCP connections to an upstream address and can cut the
// path silently, as a network partition does: while cut, bytes are held (neither
// delivered nor refused) on open connections and on new ones, and on heal they
// flow again. The node's API client goes through it; the control plane's own
// components do not, so the cluster sees the node go quiet.
type partitionProxy struct {
	upstream string
	l        net.Listener

	mu   sync.Mutex
	open map[net.Conn]bool // client ends, closed when the test ends
	cut  bool
	// healed is closed when the current cut ends; replaced at each cut.
	healed chan struct{}
}

func startPartitionProxy(t *testing.T, upstream string) *partitionProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partitionProxy{upstream: upstream, l: l, healed: make(chan struct{}), open: map[net.Conn]bool{}}
	close(p.healed)
	var conns sync.WaitGroup
	t.Cleanup(func() {
		p.heal()
		l.Close()
		p.mu.Lock()
		for c := range p.open {
			c.Close() // idle keep-alive connections of clients that are gone
		}
		p.mu.Unlock()
		conns.Wait()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				p.forward(c)
			}()
		}
	}()
	return p
}

// Addr is where clients connect instead of the upstream.
func (p *partitionProxy) Addr() string { return p.l.Addr().String() }

// Cut stops every byte between clients and the upstream until Heal.
func (p *partitionProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.cut, p.healed = true, make(chan struct{})
	}
}

func (p *partitionProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.healed)
	}
}

// Heal lets bytes flow again, those held during the cut first.
func (p *partitionProxy) Heal() { p.heal() }

// wait blocks while the path is cut.
func (p *partitionProxy) wait() {
	p.mu.Lock()
	ch := p.healed
	p.mu.Unlock()
	<-ch
}

func (p *partitionProxy) forward(client net.Conn) {
	p.mu.Lock()
	p.open[client] = true
	p.mu.Unlock()
	defer func() {
		client.Close()
		p.mu.Lock()
		delete(p.open, client)
		p.mu.Unlock()
	}()
	p.wait()
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.wait() // a cut holds what was read, as a silent network would
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		// Either side closing ends the connection.
		client.Close()
		up.Close()
		done <- struct{}{}
	}
	go pipe(up, client)
	go pipe(client, up)
	<-done
	<-done
}
