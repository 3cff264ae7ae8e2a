package nodeflags

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
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

// --log-level takes slog's levels and upstream virtual-kubelet's names with
// their meaning, and refuses others saying what it takes.
func TestLogLevelsOfSlogAndUpstream(t *testing.T) {
	for level, want := range map[string]slog.Level{
		"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError,
		"DEBUG": slog.LevelDebug, "debug-4": slog.LevelDebug - 4,
		"trace": slog.LevelDebug - 4, "warning": slog.LevelWarn, "Warning": slog.LevelWarn,
		"fatal": slog.LevelError, "panic": slog.LevelError,
	} {
		got, err := parseLevel(level)
		if err != nil || got != want {
			t.Errorf("parseLevel(%q) = %v, %v; want %v", level, got, err, want)
		}
	}
	if _, err := parseLevel("verbose"); err == nil || !strings.Contains(err.Error(), "trace, debug, info") {
		t.Errorf("parseLevel(verbose) = %v, want an error listing the levels", err)
	}
	// A trace logger writes what a debug one leaves out.
	var buf bytes.Buffer
	l, err := NewLogger(&buf, "trace", "text")
	if err != nil {
		t.Fatal(err)
	}
	l.Log(context.Background(), slog.LevelDebug-4, "very detailed")
	if !strings.Contains(buf.String(), "very detailed") {
		t.Errorf("a trace logger wrote %q", buf.String())
	}
}

func TestReplicasSpreadOnlyWithLeaderElection(t *testing.T) {
	f, err := parseNode(t, "--leader-elect", "--leader-elect-replicas", "3", "--leader-elect-group", "east")
	if err != nil || f.Election.Replicas != 3 || f.Election.Group != "east" {
		t.Errorf("replicas %d, group %q, error %v; want 3, east, none", f.Election.Replicas, f.Election.Group, err)
	}
	if _, err := parseNode(t, "--leader-elect-replicas", "3"); err == nil || !strings.Contains(err.Error(), "give both") {
		t.Errorf("--leader-elect-replicas without --leader-elect: error %v", err)
	}
	if _, err := parseNode(t, "--leader-elect", "--leader-elect-replicas", "-1"); err == nil {
		t.Error("--leader-elect-replicas -1 accepted")
	}
}
