package pod

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vkubelet/vkubelet/internal/wire/statuspatch"
)

// The pod's wire form (its status patch here) is internal/wire's; these
// names keep the rest of the package reading as before.

// statusPatch is statuspatch.Build: the patch that turns current into desired.
func statusPatch(uid types.UID, current, desired *corev1.PodStatus) ([]byte, error) {
	return statuspatch.Build(uid, current, desired)
}
