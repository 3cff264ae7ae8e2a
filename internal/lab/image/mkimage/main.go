// Command mkimage builds vkubelet's container image (package image) and writes it
// as an OCI layout archive; `make image` runs it. It prints the image's reference
// and digest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/image"
)

func main() {
	var (
		o       image.Options
		repo    = flag.String("repo", image.DefaultRepository, "repository the image is tagged in")
		out     = flag.String("out", "bin/vkubelet-image.tar", "the OCI layout archive to write")
		created = flag.Int64("created", 0, "creation time in seconds since the epoch: the commit's (SOURCE_DATE_EPOCH)")
	)
	flag.StringVar(&o.ModuleDir, "module", ".", "root of vkubelet's Go module")
	flag.StringVar(&o.Version, "version", "", "version: written into the binary, and the tag")
	flag.StringVar(&o.Revision, "revision", "", "commit, recorded as a label")
	flag.StringVar(&o.Arch, "arch", "amd64", "GOARCH to build for")
	flag.Parse()
	o.Created = time.Unix(*created, 0)
	if err := run(o, *repo, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(o image.Options, repo, out string) error {
	img, err := image.Build(context.Background(), o)
	if err != nil {
		return err
	}
	ref := repo + ":" + o.Version
	if err := image.WriteArchive(img, ref, out); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s@%s\n", out, ref, digest)
	return nil
}
