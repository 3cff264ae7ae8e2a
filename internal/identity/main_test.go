package identity_test

import (
	"testing"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/testenv"
)

func TestMain(m *testing.M) {
	// kube-controller-manager signs what is approved (client and
	// kubelet-serving certificates), and approves node-client CSRs of
	// requesters holding the nodeclient right, which ours do not.
	testenv.Main(m, controlplane.Config{ControllerManager: true})
}
