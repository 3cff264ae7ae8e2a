package resolve

import (
	"testing"
	"unsafe"
)

// The resolver keeps a podRefs, with its first podToken inline, for each of a
// node's pods, so its size class (112 bytes) is part of the memory per pod
// that `vkubelet bench` measures.
func TestAPodsRecordsFitTheirSizeClasses(t *testing.T) {
	if got := unsafe.Sizeof(podRefs{}); got > 112 {
		t.Errorf("a podRefs takes %d bytes, more than its 112-byte size class", got)
	}
}
