// Package nodeconfig reads the configuration file of a process that runs several
// virtual nodes (`vkubelet run --config FILE`): which nodes, each with its
// provider, its provider's configuration, labels, taints and capacity, and
// templates that stand for many alike nodes ("mock-%d" × 1000).
//
//	apiVersion: vkubelet.io/v1alpha1
//	kind: NodeSet
//	nodes:
//	  - name: hpc
//	    provider: kube
//	    providerConfig: kube.json     # relative to this file
//	    labels: {site: east}
//	    taints: [{key: dedicated, value: hpc, effect: NoSchedule}]
//	    capacity: {cpu: "512", memory: 2Ti, pods: "5000"}
//	  - name: mock-%d
//	    count: 1000                   # mock-0 … mock-999
//	    provider: mock
//
// Decoding is strict: a field the format does not have, a bad quantity, taint
// effect or node name is an error naming the line or the node, and nothing is
// started from a file with an error. Fields left out take the command line's
// values; fields given on the command line win over the file's (as the kubelet
// treats its flags and its configuration file), see Merge.
package nodeconfig

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The one version of the format.
const (
	APIVersion = "vkubelet.io/v1alpha1"
	Kind       = "NodeSet"
)

// MaxCount bounds a template, so that a typo does not start a million nodes.
const MaxCount = 10000

// file is the document as written.
type file struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Nodes      []nodeSpec `yaml:"nodes"`
}

// nodeSpec is one entry of nodes: a node, or a template of Count nodes.
type nodeSpec struct {
	// Name is the node's name; with Count, a pattern holding one %d.
	Name  string `yaml:"name"`
	Count int    `yaml:"count"`
	// Start is the first index of a template (default 0).
	Start          int               `yaml:"start"`
	Provider       string            `yaml:"provider"`
	ProviderConfig string            `yaml:"providerConfig"`
	Labels         map[string]string `yaml:"labels"`
	Taints         []taint           `yaml:"taints"`
	// DisableProviderTaint leaves out virtual-kubelet.io/provider=<provider>:NoSchedule.
	DisableProviderTaint *bool             `yaml:"disableProviderTaint"`
	Capacity             map[string]string `yaml:"capacity"`
	// KubeletPort is the node's kubelet API port; 0 picks a free one.
	KubeletPort *int32 `yaml:"kubeletPort"`

	line int
}

type taint struct {
	Key    string `yaml:"key"`
	Value  string `yaml:"value"`
	Effect string `yaml:"effect"`
}

// Node is one node of the file, templates expanded. Empty or nil fields were not
// in the file.
type Node struct {
	Name           string
	Provider       string
	ProviderConfig string // absolute, or empty
	Labels         map[string]string
	Taints         []corev1.Taint
	// DisableProviderTaint and KubeletPort are nil when the file does not say.
	DisableProviderTaint *bool
	Capacity             corev1.ResourceList
	KubeletPort          *int32
}

// Load reads and checks the file at path.
func Load(path string) ([]Node, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	nodes, err := Parse(data, dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return nodes, nil
}

// Parse decodes and checks a file's content; relative providerConfig paths are
// taken from dir.
func Parse(data []byte, dir string) ([]Node, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		// "line 6: field providr not found in type nodeconfig.nodeSpec": the
		// type is ours, not the reader's.
		msg := strings.NewReplacer(" in type nodeconfig.nodeSpec", "", " in type nodeconfig.file", "", "yaml: unmarshal errors:\n  ", "").Replace(err.Error())
		return nil, fmt.Errorf("decoding: %s", msg)
	}
	// The entries' lines, for the messages about them.
	var lines struct {
		Nodes []yaml.Node `yaml:"nodes"`
	}
	if err := yaml.Unmarshal(data, &lines); err == nil && len(lines.Nodes) == len(f.Nodes) {
		for i := range f.Nodes {
			f.Nodes[i].line = lines.Nodes[i].Line
		}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("line %d: a second document: one NodeSet per file", extra.Line)
	}
	if f.APIVersion != APIVersion || f.Kind != Kind {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want apiVersion %s, kind %s", f.APIVersion, f.Kind, APIVersion, Kind)
	}
	if len(f.Nodes) == 0 {
		return nil, errors.New("no nodes")
	}
	var out []Node
	seen := map[string]int{}
	for i, spec := range f.Nodes {
		nodes, err := spec.expand(dir)
		if err != nil {
			return nil, fmt.Errorf("nodes[%d] (%q): %w", i, spec.Name, err)
		}
		for _, n := range nodes {
			if j, dup := seen[n.Name]; dup {
				return nil, fmt.Errorf("nodes[%d]: node %q is also nodes[%d]", i, n.Name, j)
			}
			seen[n.Name] = i
		}
		out = append(out, nodes...)
	}
	return out, nil
}

func (s nodeSpec) expand(dir string) ([]Node, error) {
	base, err := s.node(dir)
	if err != nil {
		return nil, fmt.Errorf("line %d: %w", s.line, err)
	}
	if s.Count == 0 {
		if strings.Contains(s.Name, "%") {
			return nil, fmt.Errorf("line %d: name %q is a pattern: give a count", s.line, s.Name)
		}
		if err := checkName(s.Name); err != nil {
			return nil, fmt.Errorf("line %d: %w", s.line, err)
		}
		return []Node{base}, nil
	}
	if s.Count < 0 || s.Count > MaxCount {
		return nil, fmt.Errorf("line %d: count %d: want 1 to %d", s.line, s.Count, MaxCount)
	}
	if strings.Count(s.Name, "%d") != 1 || strings.Count(s.Name, "%") != 1 {
		return nil, fmt.Errorf("line %d: a template's name must hold %%d once (like mock-%%d), not %q", s.line, s.Name)
	}
	if s.KubeletPort != nil && *s.KubeletPort != 0 {
		return nil, fmt.Errorf("line %d: kubeletPort %d for %d nodes: they cannot share one port (leave it out or 0)", s.line, *s.KubeletPort, s.Count)
	}
	out := make([]Node, 0, s.Count)
	for i := s.Start; i < s.Start+s.Count; i++ {
		n := base
		n.Name = fmt.Sprintf(s.Name, i)
		if err := checkName(n.Name); err != nil {
			return nil, fmt.Errorf("line %d: %w", s.line, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// node is the entry's node without its name checked.
func (s nodeSpec) node(dir string) (Node, error) {
	n := Node{Name: s.Name, Provider: s.Provider, Labels: s.Labels,
		DisableProviderTaint: s.DisableProviderTaint, KubeletPort: s.KubeletPort}
	if s.Name == "" {
		return n, errors.New("a name is required")
	}
	if s.ProviderConfig != "" {
		n.ProviderConfig = s.ProviderConfig
		if !filepath.IsAbs(n.ProviderConfig) {
			n.ProviderConfig = filepath.Join(dir, n.ProviderConfig)
		}
	}
	for k, v := range s.Labels {
		for _, msg := range validation.IsQualifiedName(k) {
			return n, fmt.Errorf("label %q: %s", k, msg)
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			return n, fmt.Errorf("label %s=%q: %s", k, v, msg)
		}
	}
	for _, t := range s.Taints {
		for _, msg := range validation.IsQualifiedName(t.Key) {
			return n, fmt.Errorf("taint key %q: %s", t.Key, msg)
		}
		switch e := corev1.TaintEffect(t.Effect); e {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
			n.Taints = append(n.Taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: e})
		default:
			return n, fmt.Errorf("taint %s: effect %q: want NoSchedule, PreferNoSchedule or NoExecute", t.Key, t.Effect)
		}
	}
	if len(s.Capacity) > 0 {
		n.Capacity = corev1.ResourceList{}
		for k, v := range s.Capacity {
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return n, fmt.Errorf("capacity %s: %q: %w", k, v, err)
			}
			n.Capacity[corev1.ResourceName(k)] = q
		}
	}
	if s.KubeletPort != nil && (*s.KubeletPort < 0 || *s.KubeletPort > 65535) {
		return n, fmt.Errorf("kubeletPort %d", *s.KubeletPort)
	}
	return n, nil
}

func checkName(name string) error {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("node name %q: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}
