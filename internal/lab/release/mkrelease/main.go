// Command mkrelease makes a release of vkubelet (package release): `make
// release` runs it, and the release workflow runs `make release` on a tag. It
// prints what it made and, with -registry, where it pushed it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/vkubelet/vkubelet/internal/lab/controlplane"
	"github.com/vkubelet/vkubelet/internal/lab/release"
)

func main() {
	var (
		o         release.Options
		created   = flag.Int64("created", 0, "the commit's time in seconds since the epoch (SOURCE_DATE_EPOCH)")
		platforms = flag.String("platforms", strings.Join(release.DefaultPlatforms, ","), "platforms to build for, comma-separated")
	)
	flag.StringVar(&o.ModuleDir, "module", ".", "root of vkubelet's checkout")
	flag.StringVar(&o.Version, "version", "", "the release's version, its tag (v1.2.3)")
	flag.StringVar(&o.Revision, "revision", "", "the commit")
	flag.StringVar(&o.Out, "out", "dist", "directory the release's files are written to")
	flag.StringVar(&o.Registry, "registry", "", "registry to push the image, its SBOM and the chart to (e.g. ghcr.io/vkubelet); empty: no push")
	flag.BoolVar(&o.PlainHTTP, "plain-http", false, "the registry speaks plain HTTP (a local one)")
	flag.Parse()
	o.Created = time.Unix(*created, 0)
	o.Platforms = strings.Split(*platforms, ",")
	o.Log = os.Stderr
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "mkrelease:", err)
		os.Exit(1)
	}
}

func run(o release.Options) error {
	ctx := context.Background()
	helm, err := controlplane.EnsureHelm(ctx, os.Stderr)
	if err != nil {
		return err
	}
	o.Helm = helm
	res, err := release.Make(ctx, o)
	if err != nil {
		return err
	}
	for _, f := range append(append([]string{}, res.Binaries...), res.Checksums, res.SBOM, res.Image, res.Chart) {
		fmt.Println(f)
	}
	fmt.Println("image index", res.IndexDigest)
	for _, ref := range []string{res.ImageRef, res.SBOMRef, res.ChartRef} {
		if ref != "" {
			fmt.Println("pushed", ref)
		}
	}
	return nil
}
