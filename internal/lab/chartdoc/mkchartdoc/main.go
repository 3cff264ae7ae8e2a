// mkchartdoc writes a chart's README.md from its README.md.gotmpl and the
// comments of its values.yaml (package chartdoc): make chart-docs.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vkubelet/vkubelet/internal/lab/chartdoc"
)

func main() {
	dir := flag.String("chart", "charts/vkubelet", "the chart's directory")
	flag.Parse()
	b, err := chartdoc.README(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkchartdoc:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(filepath.Join(*dir, "README.md"), b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "mkchartdoc:", err)
		os.Exit(1)
	}
}
