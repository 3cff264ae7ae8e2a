// Package version holds vkubelet's version, set at build time with
// -ldflags "-X github.com/vkubelet/vkubelet/internal/version.Version=v0.1.0",
// and the commit and time it was built from.
package version

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version of vkubelet; "dev" for builds without ldflags.
var Version = "dev"

// Commit and Date are the commit the binary was built from and its time
// (RFC 3339), for a reproducible build date. Set with -ldflags -X, or else read
// from the VCS stamp the go command writes when it builds in a git checkout.
var Commit, Date string

// KubernetesVersion is the Kubernetes API version vkubelet is built against (its
// client-go) and speaks as a kubelet.
const KubernetesVersion = "v1.37.1"

// KubeletVersion is what the node reports in status.nodeInfo.kubeletVersion: the
// Kubernetes version, so version-skew checks see a kubelet of the right minor, with
// vkubelet's own version as a suffix.
func KubeletVersion() string { return KubernetesVersion + "-vkubelet-" + Version }

// Info is what `version` prints.
type Info struct {
	Version    string `json:"version"`
	Commit     string `json:"commit,omitempty"`
	Date       string `json:"date,omitempty"`
	Modified   bool   `json:"modified,omitempty"` // built from a checkout with uncommitted changes
	Kubernetes string `json:"kubernetes"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
}

// Get returns the binary's version information.
func Get() Info {
	info := Info{Version: Version, Commit: Commit, Date: Date, Kubernetes: KubernetesVersion,
		Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Commit == "" {
					info.Commit = s.Value
				}
			case "vcs.time":
				if info.Date == "" {
					info.Date = s.Value
				}
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	return info
}

// Command is the version subcommand of the program named program (vkubelet,
// vkubeletctl): it prints the version, the commit and its date, and the
// Kubernetes version; -o json prints them as JSON.
func Command(program string) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit it was built from and its date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := Get()
			switch output {
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			case "", "text":
				commit := info.Commit
				if commit == "" {
					commit = "unknown"
				}
				if info.Modified {
					commit += " (modified)"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s (Kubernetes %s)\ncommit %s", program, info.Version, info.Kubernetes, commit)
				if info.Date != "" {
					fmt.Fprintf(cmd.OutOrStdout(), " of %s", info.Date)
				}
				fmt.Fprintf(cmd.OutOrStdout(), ", %s, %s\n", info.Go, info.Platform)
				return nil
			default:
				return fmt.Errorf("-o %s: the version is printed as text (default) or json", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: text or json")
	return cmd
}
