// Package chartdoc writes a Helm chart's README from its values.yaml: every
// value, its default and the comment above it, in a table put into the chart's
// README.md.gotmpl. A value without a comment is an error, so the README
// documents all of them. mkchartdoc is `make chart-docs`; a test fails when
// charts/vkubelet/README.md is not what it would write.
package chartdoc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
)

// Value is one documented value of a chart.
type Value struct {
	Path    string // dotted, as --set takes it: provider.name
	Default string // as values.yaml writes it (a scalar) or as JSON (a list or map); empty for a group
	Doc     string // the comment above it, one paragraph
}

// Values reads the documented values of a values.yaml, in the file's order. A
// map whose entries carry comments is a group: its comment (if any) is a row
// of its own, followed by its entries; any other map, or a list, is one value.
func Values(valuesYAML []byte) ([]Value, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(valuesYAML, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	var out []Value
	err := walk(doc.Content[0], "", &out)
	return out, err
}

func walk(m *yaml.Node, prefix string, out *[]Value) error {
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("%s: not a map", strings.TrimSuffix(prefix, "."))
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, val := m.Content[i], m.Content[i+1]
		path := prefix + key.Value
		doc := comment(key.HeadComment)
		if val.Kind == yaml.MappingNode && documented(val) {
			if doc != "" {
				*out = append(*out, Value{Path: path, Doc: doc})
			}
			if err := walk(val, path+".", out); err != nil {
				return err
			}
			continue
		}
		if doc == "" {
			return fmt.Errorf("values.yaml line %d: %s has no comment to document it", key.Line, path)
		}
		def, err := render(val)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		*out = append(*out, Value{Path: path, Default: def, Doc: doc})
	}
	return nil
}

// documented reports whether a map has an entry with a comment of its own.
func documented(m *yaml.Node) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if comment(m.Content[i].HeadComment) != "" {
			return true
		}
	}
	return false
}

// comment is a head comment's text, its lines joined. Of comment blocks
// separated by blank lines, only the last (the one touching the key) counts.
func comment(head string) string {
	blocks := strings.Split(head, "\n\n")
	var words []string
	for _, line := range strings.Split(blocks[len(blocks)-1], "\n") {
		if line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#")); line != "" {
			words = append(words, line)
		}
	}
	return strings.Join(words, " ")
}

// render is a default as the README shows it.
func render(n *yaml.Node) (string, error) {
	if n.Kind == yaml.ScalarNode {
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			return fmt.Sprintf("%q", n.Value), nil
		}
		return n.Value, nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// Table is the values as a Markdown table.
func Table(values []Value) string {
	var b strings.Builder
	b.WriteString("| value | default | description |\n| --- | --- | --- |\n")
	for _, v := range values {
		def := ""
		if v.Default != "" {
			def = "`" + cell(v.Default) + "`"
		}
		doc := strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(v.Doc)
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.Path, def, cell(doc))
	}
	return b.String()
}

// cell escapes what would end a table cell. (Descriptions also have < and >
// escaped, which Markdown would take for HTML; defaults are code.)
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Chart is what README.md.gotmpl is given.
type Chart struct {
	Name, Description, Version, AppVersion, KubeVersion string
	// Values is the table of values.
	Values string
}

// README is the README of the chart in dir: its README.md.gotmpl executed
// with the chart's metadata and the table of its values.
func README(dir string) ([]byte, error) {
	var meta struct {
		Name        string `yaml:"name"`
		Description string `yaml:"description"`
		Version     string `yaml:"version"`
		AppVersion  string `yaml:"appVersion"`
		KubeVersion string `yaml:"kubeVersion"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	if b, err = os.ReadFile(filepath.Join(dir, "values.yaml")); err != nil {
		return nil, err
	}
	values, err := Values(b)
	if err != nil {
		return nil, err
	}
	tmpl, err := template.ParseFiles(filepath.Join(dir, "README.md.gotmpl"))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	err = tmpl.Execute(&out, Chart{Name: meta.Name, Description: strings.TrimSpace(meta.Description), Version: meta.Version,
		AppVersion: meta.AppVersion, KubeVersion: meta.KubeVersion, Values: Table(values)})
	return out.Bytes(), err
}
