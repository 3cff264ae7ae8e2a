package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/e2econformance"
)

func newConformanceCommand() *cobra.Command {
	cfg := e2econformance.Config{
		Selection:    e2econformance.Selection{Focus: e2econformance.DefaultFocus, LabelFilter: e2econformance.DefaultLabelFilter},
		Timeout:      time.Hour,
		NodeLogLevel: "info",
		Procs:        20,
	}
	var listImages, buildOnly bool
	cri := true
	cmd := &cobra.Command{
		Use:   "conformance",
		Short: "Run Kubernetes' own e2e tests against vkubelet nodes (CRI, kube) and a kubelet on this machine",
		Long: `conformance builds e2e.test and the test images from the control plane's
Kubernetes version (the first time takes long), starts vkubeletctl up --provider
cri (root: containerd, runc and the CNI plugins, as scripts/setup.sh installs),
pushes the images to its local registry, runs the selected tests against the
virtual node and prints each one's outcome. With --kubelet it runs them again on
a real kubelet joined to the cluster, with --kube on a vkubelet node whose kube
provider offloads the pods to a second cluster (its node a real kubelet), and
compares; --cri=false leaves the CRI node's run out. The JUnit reports and the
suite's output are in --dir. docs/CONFORMANCE.md says what it covers.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if listImages {
				for _, img := range e2econformance.UnavailableImages() {
					fmt.Fprintf(cmd.OutOrStdout(), "unavailable %s: %s\n", img.Path, img.How)
				}
				return nil
			}
			if buildOnly {
				e2e, err := controlplane.EnsureE2E(cmd.Context(), cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				for _, p := range []string{e2e.Test, e2e.Ginkgo, e2e.Kubelet, e2e.Agnhost, e2e.Nonewprivs, e2e.Pause} {
					fmt.Fprintln(cmd.OutOrStdout(), p)
				}
				return nil
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Vkubeletctl = self
			cfg.SkipCRI = !cri
			if cfg.Kube && cfg.Vkubelet == "" {
				cfg.Vkubelet = filepath.Join(filepath.Dir(self), "vkubelet")
			}
			if cfg.Kube {
				if _, err := os.Stat(cfg.Vkubelet); err != nil {
					return fmt.Errorf("--kube runs the vkubelet program (go build -o bin/ ./cmd/vkubelet, or --vkubelet): %w", err)
				}
			}
			if cfg.Dir == "" {
				cache, err := controlplane.CacheDir()
				if err != nil {
					return err
				}
				cfg.Dir = filepath.Join(cache, "conformance")
			}
			cfg.Out = cmd.ErrOrStderr()
			_, err = e2econformance.Run(cmd.Context(), cfg)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Dir, "dir", "", "where the run's cluster, logs and reports go, emptied first (default: <cache>/conformance, see VKUBELET_CACHE)")
	fl.StringVar(&cfg.Selection.Focus, "focus", cfg.Selection.Focus, "run only the tests whose full name matches this regular expression (ginkgo's --focus)")
	fl.StringVar(&cfg.Selection.Skip, "skip", cfg.Selection.Skip, "leave out the tests whose full name matches this regular expression (ginkgo's --skip)")
	fl.StringVar(&cfg.Selection.LabelFilter, "label-filter", cfg.Selection.LabelFilter, "run only the tests whose labels match (ginkgo's --label-filter)")
	fl.IntVar(&cfg.Procs, "procs", cfg.Procs, "ginkgo processes running tests side by side (1: e2e.test alone, one test at a time); the tests mostly wait, so many fit on few cores")
	fl.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "stop the suite after this long")
	fl.BoolVar(&cfg.Kubelet, "kubelet", false, "run the same tests a second time on a real kubelet (of the same Kubernetes version, on the same containerd) joined to the cluster, and compare")
	fl.BoolVar(&cri, "cri", cri, "run the tests on the vkubelet CRI node (--cri=false: only on the nodes --kubelet and --kube add)")
	fl.BoolVar(&cfg.Kube, "kube", false, "run the same tests, last, on a vkubelet node with the kube provider, offloading to a second local cluster whose node is a real kubelet, and compare")
	fl.StringVar(&cfg.Vkubelet, "vkubelet", "", "the vkubelet program the kube provider's node runs (default: vkubelet beside vkubeletctl)")
	fl.StringVar(&cfg.NodeLogLevel, "node-log-level", cfg.NodeLogLevel, "the virtual nodes' log level")
	fl.BoolVar(&buildOnly, "build-only", false, "build (or find in the cache) e2e.test, the kubelet and the test images' programs, print their paths, and exit")
	fl.BoolVar(&listImages, "list-unavailable-images", false, "print the suite's images that cannot be made here, and exit")
	return cmd
}
