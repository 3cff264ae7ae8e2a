package informerutil

import (
	"sync"

	"k8s.io/client-go/tools/cache"
)

// Informers runs a set of informers as client-go's SharedInformerFactory runs
// its own, without the factory: package k8s.io/client-go/informers knows every
// API group, and linking it links the informers and listers of all of them,
// some 4 MB of the node's binary mapped into every node process. Build an
// informer with the constructor of its group's package (informers/core/v1's
// NewFilteredPodInformer, ...) or cache.NewSharedIndexInformer.
type Informers struct {
	mu       sync.Mutex
	list     []cache.SharedIndexInformer
	started  map[cache.SharedIndexInformer]bool
	shutdown bool
	wg       sync.WaitGroup
}

// Add adds informers to those Start runs.
func (g *Informers) Add(informers ...cache.SharedIndexInformer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.list = append(g.list, informers...)
}

// Start runs each informer not yet started until stop is closed; after
// Shutdown it does nothing.
func (g *Informers) Start(stop <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shutdown {
		return
	}
	if g.started == nil {
		g.started = make(map[cache.SharedIndexInformer]bool, len(g.list))
	}
	for _, informer := range g.list {
		if g.started[informer] {
			continue
		}
		g.started[informer] = true
		g.wg.Go(func() { informer.Run(stop) })
	}
}

// WaitForCacheSync waits until every informer started has synced, or stop is
// closed; it says whether they all did.
func (g *Informers) WaitForCacheSync(stop <-chan struct{}) bool {
	g.mu.Lock()
	var synced []cache.InformerSynced
	for informer := range g.started {
		synced = append(synced, informer.HasSynced)
	}
	g.mu.Unlock()
	return cache.WaitForCacheSync(stop, synced...)
}

// Shutdown keeps Start from starting informers and waits for those started to
// stop: close their stop channel first.
func (g *Informers) Shutdown() {
	g.mu.Lock()
	g.shutdown = true
	g.mu.Unlock()
	g.wg.Wait()
}
