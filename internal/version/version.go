// Package version holds vkubelet's version, set at build time with
// -ldflags "-X github.com/vkubelet/vkubelet/internal/version.Version=v0.1.0".
package version

import (
	"fmt"

	"github.com/spf13/cobra"
)

// Version of vkubelet; "dev" for builds without ldflags.
var Version = "dev"

// KubernetesVersion is the Kubernetes API version vkubelet is built against (its
// client-go) and speaks as a kubelet.
const KubernetesVersion = "v1.37.1"

// KubeletVersion is what the node reports in status.nodeInfo.kubeletVersion: the
// Kubernetes version, so version-skew checks see a kubelet of the right minor, with
// vkubelet's own version as a suffix.
func KubeletVersion() string { return KubernetesVersion + "-vkubelet-" + Version }

// Command is the version subcommand of the program named program (vkubelet,
// vkubeletctl): it prints the version and the Kubernetes version.
func Command(program string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s (Kubernetes %s)\n", program, Version, KubernetesVersion)
		},
	}
}
