package nodeconfig

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const header = "apiVersion: vkubelet.io/v1alpha1\nkind: NodeSet\n"

func TestNodesAndTemplatesExpand(t *testing.T) {
	nodes, err := Parse([]byte(header+`nodes:
  - name: hpc
    provider: kube
    providerConfig: kube.json
    labels: {site: east}
    taints: [{key: dedicated, value: hpc, effect: NoSchedule}]
    capacity: {cpu: "512", memory: 2Ti, pods: "5000"}
    kubeletPort: 10251
    disableProviderTaint: true
  - name: mock-%d
    count: 3
    start: 1
    provider: mock
`), "/etc/vkubelet")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	if got := strings.Join(names, ","); got != "hpc,mock-1,mock-2,mock-3" {
		t.Fatalf("nodes %s", got)
	}
	hpc := nodes[0]
	if hpc.ProviderConfig != "/etc/vkubelet/kube.json" || hpc.Labels["site"] != "east" || *hpc.KubeletPort != 10251 || !*hpc.DisableProviderTaint {
		t.Errorf("hpc: %+v", hpc)
	}
	if len(hpc.Taints) != 1 || hpc.Taints[0] != (corev1.Taint{Key: "dedicated", Value: "hpc", Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("taints %v", hpc.Taints)
	}
	if q := hpc.Capacity[corev1.ResourceMemory]; q.String() != "2Ti" {
		t.Errorf("memory capacity %s", q.String())
	}
	if m := nodes[2]; m.Provider != "mock" || m.KubeletPort != nil || m.DisableProviderTaint != nil || m.Capacity != nil {
		t.Errorf("mock-2: %+v (unset fields must stay unset, for the command line's values)", m)
	}
}

// Each mistake is an error that says where it is, and no node comes out.
func TestBadFilesSayWhatAndWhere(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"unknown field", header + "nodes:\n  - name: a\n    providr: mock\n", "line 5: field providr not found"},
		{"unknown top field", header + "node:\n  - name: a\n", "line 3: field node not found"},
		{"wrong kind", "apiVersion: vkubelet.io/v1alpha1\nkind: Nodes\nnodes: [{name: a}]\n", `kind "Nodes"`},
		{"wrong version", "apiVersion: v1\nkind: NodeSet\nnodes: [{name: a}]\n", `apiVersion "v1"`},
		{"no nodes", header + "nodes: []\n", "no nodes"},
		{"no name", header + "nodes:\n  - provider: mock\n", "line 4: a name is required"},
		{"bad name", header + "nodes:\n  - name: Not_A_Node\n", `line 4: node name "Not_A_Node"`},
		{"pattern without count", header + "nodes:\n  - name: mock-%d\n", "is a pattern: give a count"},
		{"count without pattern", header + "nodes:\n  - name: mock\n    count: 3\n", "must hold %d once"},
		{"count too big", header + "nodes:\n  - name: m-%d\n    count: 20000\n", "count 20000: want 1 to 10000"},
		{"duplicate", header + "nodes:\n  - name: m-1\n  - name: m-%d\n    count: 2\n", `nodes[1]: node "m-1" is also nodes[0]`},
		{"bad quantity", header + "nodes:\n  - name: a\n    capacity: {cpu: lots}\n", `line 4: capacity cpu: "lots"`},
		{"bad effect", header + "nodes:\n  - name: a\n    taints: [{key: k, effect: Never}]\n", `effect "Never"`},
		{"bad label", header + "nodes:\n  - name: a\n    labels: {\"bad key!\": x}\n", `label "bad key!"`},
		{"shared port", header + "nodes:\n  - name: m-%d\n    count: 2\n    kubeletPort: 10250\n", "cannot share one port"},
		{"two documents", header + "nodes: [{name: a}]\n---\n" + header + "nodes: [{name: b}]\n", "a second document"},
		{"not yaml", "nodes: [", "decoding"},
		{"wrong type", header + "nodes:\n  - name: a\n    count: many\n", "line 5: cannot unmarshal"},
	} {
		nodes, err := Parse([]byte(tc.doc), "/")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (nodes %v); want an error containing %q", tc.name, err, nodes, tc.want)
		}
	}
}
