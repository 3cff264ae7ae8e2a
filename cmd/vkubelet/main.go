// Command vkubelet runs a virtual node: it registers a node in a Kubernetes cluster
// and hands the pods bound to it to a provider. It is the node alone, the binary of
// the container image; the local control plane to try it on (up), the benchmark
// and the control plane's binaries are vkubeletctl's (cmd/vkubeletctl). Its
// command is internal/process/nodecmd's with the built-in providers, the one a
// program built with package sdk runs with its own providers beside them.
package main

import (
	"github.com/spf13/cobra"

	"github.com/vkubelet/vkubelet/internal/process/nodecmd"
	"github.com/vkubelet/vkubelet/internal/process/registry"
)

func main() {
	nodecmd.Main(newRootCommand())
}

func newRootCommand() *cobra.Command {
	return nodecmd.New(registry.Builtin())
}
