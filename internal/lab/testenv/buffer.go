package testenv

import (
	"strings"
	"sync"
)

// Buffer collects what goroutines write (a child's output, a logger, a stream)
// while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// Close does nothing: a Buffer may stand for a stream that is closed.
func (b *Buffer) Close() error { return nil }

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
