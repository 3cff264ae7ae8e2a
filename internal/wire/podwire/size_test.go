package podwire

import (
	"testing"
	"unsafe"
)

// A node keeps a Pod for each of its pods, so its size class (128 bytes) is
// part of the memory per pod that `vkubeletctl bench` measures; a field added or
// moved carelessly puts every pod in the next class up.
func TestAPodFitsItsSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(Pod{}); got > 128 {
		t.Errorf("a Pod takes %d bytes, more than its 128-byte size class", got)
	}
}
