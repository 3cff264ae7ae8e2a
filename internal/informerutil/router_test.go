package informerutil

import (
	"fmt"
	"testing"

	"k8s.io/client-go/tools/cache"
)

// recorder records the events it is handed.
type recorder struct{ events []string }

func (r *recorder) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.events = append(r.events, fmt.Sprint("add ", obj)) },
		UpdateFunc: func(_, obj any) { r.events = append(r.events, fmt.Sprint("update ", obj)) },
		DeleteFunc: func(obj any) { r.events = append(r.events, fmt.Sprint("delete ", obj)) },
	}
}

func TestARouterHandsEachKeysEventsToItsHandlerOnly(t *testing.T) {
	// Objects are "key/name" strings here.
	r := NewRouter(func(obj any) (string, bool) {
		s, ok := obj.(string)
		if !ok {
			return "", false
		}
		return s[:1], true
	})
	var a, b recorder
	unregisterA, err := r.Register("a", a.handler(), func(h cache.ResourceEventHandler) { h.OnAdd("a/cached", true) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register("b", b.handler(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register("a", b.handler(), nil); err == nil {
		t.Error("a second handler for a was accepted")
	}
	h := r.Handler()
	h.OnAdd("a/1", false)
	h.OnUpdate("b/2", "b/2")
	h.OnDelete("c/3")  // no handler: dropped
	h.OnAdd(42, false) // no key: dropped
	unregisterA()
	h.OnDelete("a/1") // unregistered: dropped
	if got := fmt.Sprint(a.events, b.events); got != "[add a/cached add a/1] [update b/2]" {
		t.Errorf("handled %s", got)
	}
}
