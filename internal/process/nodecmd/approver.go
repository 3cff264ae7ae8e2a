package nodecmd

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vkubelet/vkubelet/internal/identity"
	"github.com/vkubelet/vkubelet/internal/process/nodeconfig"
	"github.com/vkubelet/vkubelet/internal/process/nodeflags"
)

// approverFlags are the flags of `vkubelet approve-csrs`.
type approverFlags struct {
	kubeconfig, nodeSet         string
	names, prefixes             []string
	requesters, requesterGroups []string
	servingCIDRs                []string
	podSelector, podNamespace   string
	healthzAddr, level, format  string
	workers                     int
}

func newApproverCommand() *cobra.Command {
	f := approverFlags{podNamespace: os.Getenv("POD_NAMESPACE"), level: "info", format: "text", workers: 2}
	cmd := &cobra.Command{
		Use:   "approve-csrs",
		Short: "Approve the certificate requests of this install's nodes, and deny its requesters anything else",
		Long: `approve-csrs approves the client (system:node:<name>) and kubelet-serving CSRs
of the node names an install owns (--node, --node-prefix, or the names of a
NodeSet file, --config), when they come from the install's bootstrap account
(--requester, --requester-group) or from one of those nodes renewing its own
certificate, and a serving certificate names only the node's name and its
addresses (--serving-cidr, or the addresses of the install's own pods,
--serving-pod-selector). A request of those requesters for anything else is
denied, with the reason in the CSR and an Event. Anyone else's CSRs are left
alone. Run it under an account of its own: the nodes' bootstrap account then
needs only the right to create CSRs (docs/DEPLOYING.md).`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE:         f.run,
	}
	fs := cmd.Flags()
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the approver's own account (default: in-cluster)")
	fs.StringSliceVar(&f.names, "node", nil, "a node name this install owns (repeatable, or comma-separated)")
	fs.StringSliceVar(&f.prefixes, "node-prefix", nil, "a prefix of node names this install owns: every longer name starting with it")
	fs.StringVar(&f.nodeSet, "config", "", "a NodeSet file (as for vkubelet run --config) whose node names this install owns")
	fs.StringSliceVar(&f.requesters, "requester", nil, "a user that asks for a node's first certificate: the install's bootstrap account (system:serviceaccount:<namespace>:<name>)")
	fs.StringSliceVar(&f.requesterGroups, "requester-group", nil, "a group whose members ask for a node's first certificate (the group of the install's bootstrap tokens)")
	fs.StringSliceVar(&f.servingCIDRs, "serving-cidr", nil, "an address or CIDR a node's serving certificate may name (repeatable)")
	fs.StringVar(&f.podSelector, "serving-pod-selector", "", "label selector of the install's node pods: their addresses may be named in serving certificates")
	fs.StringVar(&f.podNamespace, "serving-pod-namespace", f.podNamespace, "namespace of those pods (default: $POD_NAMESPACE)")
	fs.StringVar(&f.healthzAddr, "healthz-addr", "", "address serving /healthz, unauthenticated, for probes; empty disables")
	fs.IntVar(&f.workers, "workers", f.workers, "CSRs decided at once")
	fs.StringVar(&f.level, "log-level", f.level, "debug, info, warn or error")
	fs.StringVar(&f.format, "log-format", f.format, "text or json")
	return cmd
}

// policy is the approval policy the flags describe.
func (f *approverFlags) policy() (identity.Policy, error) {
	p := identity.Policy{Names: f.names, Prefixes: f.prefixes, Requesters: f.requesters, RequesterGroups: f.requesterGroups}
	if f.nodeSet != "" {
		nodes, err := nodeconfig.Load(f.nodeSet)
		if err != nil {
			return p, fmt.Errorf("--config: %w", err)
		}
		for _, n := range nodes {
			p.Names = append(p.Names, n.Name)
		}
	}
	cidrs, err := identity.ParseCIDRs(f.servingCIDRs...)
	if err != nil {
		return p, fmt.Errorf("--serving-cidr: %w", err)
	}
	if len(cidrs) > 0 {
		p.ServingIPs = cidrs
	}
	return p, p.Validate()
}

func (f *approverFlags) run(cmd *cobra.Command, _ []string) error {
	log, err := nodeflags.NewLogger(cmd.ErrOrStderr(), f.level, f.format)
	if err != nil {
		return err
	}
	p, err := f.policy()
	if err != nil {
		return err
	}
	cfg := identity.ApproverConfig{Policy: p, Logger: log, PodNamespace: f.podNamespace}
	if f.podSelector != "" {
		if cfg.PodSelector, err = labels.Parse(f.podSelector); err != nil {
			return fmt.Errorf("--serving-pod-selector: %w", err)
		}
		if f.podNamespace == "" {
			return errors.New("--serving-pod-selector needs --serving-pod-namespace (or $POD_NAMESPACE)")
		}
	}
	var rc *rest.Config
	if f.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("the approver's credential: %w", err)
	}
	rc.UserAgent = "vkubelet-csr-approver"
	if cfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	c, err := identity.NewApprover(cfg)
	if err != nil {
		return err
	}
	if f.healthzAddr != "" {
		l, err := net.Listen("tcp", f.healthzAddr)
		if err != nil {
			return fmt.Errorf("--healthz-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
	}
	return c.Run(cmd.Context(), f.workers)
}
