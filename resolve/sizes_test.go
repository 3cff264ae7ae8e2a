package resolve

import (
	"testing"
	"unsafe"
)

// The resolver keeps a podRefs and, for most pods, one podToken for each of a
// node's pods, so their size classes (80 and 64 bytes) are part of the memory
// per pod that `vkubelet bench` measures.
func TestAPodsRecordsFitTheirSizeClasses(t *testing.T) {
	if got := unsafe.Sizeof(podRefs{}); got > 80 {
		t.Errorf("a podRefs takes %d bytes, more than its 80-byte size class", got)
	}
	if got := unsafe.Sizeof(podToken{}); got > 64 {
		t.Errorf("a podToken takes %d bytes, more than its 64-byte size class", got)
	}
}
