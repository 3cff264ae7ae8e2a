package nodecmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vkubelet/vkubelet/internal/process/nodeconfig"
	"github.com/vkubelet/vkubelet/internal/process/nodeflags"
	"github.com/vkubelet/vkubelet/internal/process/noderemove"
)

// removeNodeFlags are the flags of `vkubelet remove-node`.
type removeNodeFlags struct {
	kubeconfig, nodeSet string
	timeout             time.Duration
	level, format       string
}

func newRemoveNodeCommand() *cobra.Command {
	f := removeNodeFlags{kubeconfig: os.Getenv("KUBECONFIG"), timeout: 5 * time.Minute, level: "info", format: "text"}
	cmd := &cobra.Command{
		Use:   "remove-node [NODE...]",
		Short: "Take virtual nodes out of the cluster for good: cordon, drain through the Eviction API, delete the Node and its Lease",
		Long: `remove-node does for each node named (or each node of a NodeSet file, --config)
what kubectl drain and kubectl delete node do for a kubelet's: it cordons the
node and marks it for removal, evicts the pods bound to it through the Eviction
API (PodDisruptionBudgets hold; a refused eviction is asked again) and waits
until they are gone, deletes the Node, evicts its DaemonSet pods (which the
DaemonSet controller would have put back while the Node existed), and deletes
its Lease in kube-node-lease. Mirror pods are left alone.

Run it while the node's process runs: that process stops each evicted pod in the
provider and removes it from the API only once the provider confirmed it stopped,
and, seeing the mark, does not register the Node again. Then stop the process.

If the pods are not gone within --timeout, it fails and names them and why (a
budget refusing, a pod the provider has not stopped), leaving the Node cordoned
(kubectl uncordon cancels the removal). A node already gone is a success: run it
again after a failure. The credential needs, on these nodes, get, patch and
delete of nodes and delete of their leases, and list of pods and create of
pods/eviction (docs/DEPLOYING.md, "Uninstall").`,
		SilenceUsage: true,
		RunE:         f.run,
	}
	fs := cmd.Flags()
	fs.StringVar(&f.kubeconfig, "kubeconfig", f.kubeconfig, "kubeconfig of an account allowed to remove the nodes ($KUBECONFIG; empty: in-cluster config)")
	fs.StringVar(&f.nodeSet, "config", "", "a NodeSet file (as for vkubelet run --config): remove its nodes")
	fs.DurationVar(&f.timeout, "timeout", f.timeout, "how long the whole removal may take, the pods' stop included")
	fs.StringVar(&f.level, "log-level", f.level, "debug, info, warn or error")
	fs.StringVar(&f.format, "log-format", f.format, "text or json")
	return cmd
}

// names are the nodes the arguments and --config name.
func (f *removeNodeFlags) names(args []string) ([]string, error) {
	names := append([]string(nil), args...)
	if f.nodeSet != "" {
		nodes, err := nodeconfig.Load(f.nodeSet)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		for _, n := range nodes {
			names = append(names, n.Name)
		}
	}
	if len(names) == 0 {
		return nil, errors.New("name the nodes to remove, or give a NodeSet file with --config")
	}
	return names, nil
}

func (f *removeNodeFlags) run(cmd *cobra.Command, args []string) error {
	names, err := f.names(args)
	if err != nil {
		return err
	}
	if f.timeout <= 0 {
		return fmt.Errorf("--timeout %s: want a positive duration", f.timeout)
	}
	log, err := nodeflags.NewLogger(cmd.ErrOrStderr(), f.level, f.format)
	if err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return fmt.Errorf("the credential (--kubeconfig): %w", err)
	}
	rc.UserAgent = "vkubelet-remove-node"
	// Evictions of a full node, one request each.
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(cmd.Context(), f.timeout, fmt.Errorf("the removal's --timeout of %s passed", f.timeout))
	defer cancel()
	return noderemove.RemoveAll(ctx, noderemove.Config{Client: client, Logger: log}, names)
}
