// Command mkwirefixtures records the wire fixtures of Kubernetes releases
// (internal/lab/wirefixtures) into internal/wire/testdata/releases/<version>:
// what each release's API server sends to the node's decoders. Run it from the
// repository's root.
//
//	go run ./internal/lab/wirefixtures/mkwirefixtures                   # every release already built
//	go run ./internal/lab/wirefixtures/mkwirefixtures -versions v1.37.1,v1.34.4
//
// Without -versions it records each release of controlplane.KubernetesVersions
// whose binaries are in the lab's cache and says which it skipped: building a
// release takes minutes, and starting any control plane of it builds it. A
// release named with -versions is recorded even if that means building it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/wirefixtures"
)

func main() {
	versions := flag.String("versions", "", "comma-separated releases to record (default: every release whose binaries are built)")
	out := flag.String("out", "internal/wire/testdata/releases", "the fixtures' directory")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *versions, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkwirefixtures:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, versions, out string) error {
	var todo []string
	if versions != "" {
		todo = strings.Split(versions, ",")
	} else {
		for _, v := range controlplane.KubernetesVersions() {
			built, err := wirefixtures.Built(v)
			if err != nil {
				return err
			}
			if !built {
				fmt.Fprintf(os.Stderr, "mkwirefixtures: skipping %s: its binaries are not built\n", v)
				continue
			}
			todo = append(todo, v)
		}
	}
	var failed []string
	for _, v := range todo {
		if err := wirefixtures.Record(ctx, strings.TrimSpace(v), out, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "mkwirefixtures:", err)
			failed = append(failed, v)
			continue
		}
		fmt.Fprintf(os.Stderr, "mkwirefixtures: recorded %s in %s/%s\n", v, out, v)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d releases failed: %s", len(failed), len(todo), strings.Join(failed, ", "))
	}
	return nil
}
