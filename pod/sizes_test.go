package pod

import (
	"testing"
	"unsafe"
)

// A node keeps a podState and a podwire.Pod for each of its pods, so their size
// classes (80 and 128 bytes) are part of the memory per pod that `vkubelet
// bench` measures; a field added or moved carelessly puts every pod in the
// next class up. (The podwire.Pod's: podwire.TestAPodFitsItsSizeClass.)
func TestAPodsStateFitsItsSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(podState{}); got > 80 {
		t.Errorf("a podState takes %d bytes, more than its 80-byte size class", got)
	}
}
