package informerutil

import (
	"fmt"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// Router hands the events of one informer, shared by the nodes of a process, to
// the handler registered for each object's key (the name of the node it belongs
// to); objects of keys without a handler are cached and not handled. It is the
// informer's only event handler (Handler).
type Router struct {
	// key names the handler of an object; a tombstone is passed as it is.
	key func(obj any) (string, bool)

	mu       sync.RWMutex
	handlers map[string]cache.ResourceEventHandler
}

// NewRouter returns a Router that routes each object by key.
func NewRouter(key func(obj any) (string, bool)) *Router {
	return &Router{key: key, handlers: map[string]cache.ResourceEventHandler{}}
}

// Handler is the event handler to add to the informer.
func (r *Router) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if h := r.handler(obj); h != nil {
				h.OnAdd(obj, false)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if h := r.handler(newObj); h != nil {
				h.OnUpdate(oldObj, newObj)
			}
		},
		DeleteFunc: func(obj any) {
			if h := r.handler(obj); h != nil {
				h.OnDelete(obj)
			}
		},
	}
}

func (r *Router) handler(obj any) cache.ResourceEventHandler {
	key, ok := r.key(obj)
	if !ok {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.handlers[key]
}

// Register makes h the handler of key's objects until the returned function is
// called. replay, if not nil, runs first with h, under the lock that event
// delivery takes, to hand h what the informer already holds: an event of key's
// objects is then delivered before the replay (and dropped, the replay covering
// it, as an informer writes its cache before it delivers) or after it.
func (r *Router) Register(key string, h cache.ResourceEventHandler, replay func(cache.ResourceEventHandler)) (unregister func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, taken := r.handlers[key]; taken {
		return nil, fmt.Errorf("%s already has a handler: is its controller running twice?", key)
	}
	r.handlers[key] = h
	if replay != nil {
		replay(h)
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.handlers, key)
	}, nil
}
