package nodeflags

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestJSONLogsCarryKlogLinesOfTheKubernetesLibraries(t *testing.T) {
	var buf bytes.Buffer
	l, err := NewLogger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	klog.SetSlogLogger(l)
	defer klog.ClearLogger()
	l.Info("from vkubelet", "node", "vk")
	klog.InfoS("from client-go", "reflector", "pods")
	klog.Flush()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines, want 2:\n%s", len(lines), buf.String())
	}
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", line, err)
		}
	}
	if !strings.Contains(lines[1], `"msg":"from client-go"`) || !strings.Contains(lines[1], `"reflector":"pods"`) {
		t.Errorf("klog line %q, want its message and key/values as JSON", lines[1])
	}
}

func TestAnUnknownLogFormatIsRefused(t *testing.T) {
	if _, err := NewLogger(&bytes.Buffer{}, "info", "yaml"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("err = %v, want one naming --log-format", err)
	}
}
