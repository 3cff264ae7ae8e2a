package chartdoc

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// charts/vkubelet/README.md is what `make chart-docs` writes from the chart's
// values.yaml and README.md.gotmpl.
func TestTheChartsREADMEIsCurrent(t *testing.T) {
	const dir = "../../../charts/vkubelet"
	want, err := README(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("charts/vkubelet/README.md is stale: run make chart-docs")
	}
}

func TestValues(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []Value
		wantErr    string
	}{{
		name: "scalars keep their spelling; lists and maps are JSON",
		yaml: "# The file's comment.\n\n# A mode.\nmode: 0440\n# A name.\nname: \"\"\n# Some args.\nargs: [a, b]\n# Limits.\nresources:\n  limits:\n    memory: 1Mi\n",
		want: []Value{
			{Path: "mode", Default: "0440", Doc: "A mode."},
			{Path: "name", Default: `""`, Doc: "A name."},
			{Path: "args", Default: `["a","b"]`, Doc: "Some args."},
			{Path: "resources", Default: `{"limits":{"memory":"1Mi"}}`, Doc: "Limits."},
		},
	}, {
		name: "a map with documented entries is a group, its comment a row",
		yaml: "# The group,\n# on two lines.\ng:\n  # Its first.\n  a: 1\n  # Its second.\n  b:\n    # Deeper.\n    c: x\nplain:\n  # Documented.\n  d: true\n",
		want: []Value{
			{Path: "g", Doc: "The group, on two lines."},
			{Path: "g.a", Default: "1", Doc: "Its first."},
			{Path: "g.b", Doc: "Its second."},
			{Path: "g.b.c", Default: "x", Doc: "Deeper."},
			{Path: "plain.d", Default: "true", Doc: "Documented."},
		},
	}, {
		name:    "a value without a comment is an error",
		yaml:    "# Documented.\na: 1\nb: 2\n",
		wantErr: "line 3: b has no comment",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Values([]byte(tc.yaml))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestTableEscapesWhatMarkdownWouldMisread(t *testing.T) {
	got := Table([]Value{{Path: "taint", Default: "a|b", Doc: "key=<provider> | effect"}})
	if want := "| `taint` | `a\\|b` | key=&lt;provider&gt; \\| effect |\n"; !strings.HasSuffix(got, want) {
		t.Errorf("got %q, want it to end with %q", got, want)
	}
}
