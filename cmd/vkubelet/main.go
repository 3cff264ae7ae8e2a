// Command vkubelet runs a virtual node: it registers a node in a Kubernetes cluster
// and hands the pods bound to it to a provider. It is the node alone, the binary of
// the container image; the local control plane to try it on (up), the benchmark
// and the control plane's binaries are vkubeletctl's (cmd/vkubeletctl).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "vkubelet:", err)
		os.Exit(1)
	}
}
