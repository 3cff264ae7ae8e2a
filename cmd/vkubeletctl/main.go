// Command vkubeletctl is vkubelet's lab: it starts a local control plane with
// virtual nodes to try vkubelet on (up), measures a node (bench) and builds the
// control plane's binaries (controlplane build). The node itself is the vkubelet
// command, which links none of this; bench runs it as a child process.
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
		fmt.Fprintln(os.Stderr, "vkubeletctl:", err)
		os.Exit(1)
	}
}
