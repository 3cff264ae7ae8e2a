package resolve

import (
	"maps"
	"testing"
	"unsafe"
)

func TestThePodIndexKeepsThePodsOwnStrings(t *testing.T) {
	x := podIndex{}
	ns, name := "shop", string([]byte("web-1")) // a name of its own, as a decoded pod's
	a, b := &podRefs{uid: "a"}, &podRefs{uid: "b"}
	x.put(ns, name, a)
	x.put("shop", "web-2", b)
	if x.get("shop/web-1") != a || x.get("shop/web-2") != b || x.get("shop/web-3") != nil || x.get("other/web-1") != nil {
		t.Fatal("get found the wrong pods")
	}
	for key := range x["shop"] {
		if key == "web-1" && unsafe.StringData(key) != unsafe.StringData(name) {
			t.Error("the index keeps a copy of the pod's name")
		}
	}
	got := maps.Collect(func(yield func(string, *podRefs) bool) {
		for n, p := range x.all() {
			if !yield(n.key(), p) {
				return
			}
		}
	})
	if len(got) != 2 || got["shop/web-1"] != a || got["shop/web-2"] != b {
		t.Errorf("all yielded %v", got)
	}
	x.remove("shop/web-1")
	x.remove("shop/web-9")
	if x.get("shop/web-1") != nil || x.get("shop/web-2") != b {
		t.Fatal("remove removed the wrong pods")
	}
	x.remove("shop/web-2")
	if len(x) != 0 {
		t.Errorf("an emptied namespace's map stays: %v", x)
	}
}
