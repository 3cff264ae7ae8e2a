package mock

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// statsProvider runs two pods (web: one container requesting 200m and 64Mi; db: two
// containers requesting nothing) and one pending pod. The node started at t0, the
// pods at t0+10s, and the clock is at t0+20s.
const statsStart, statsNow = 10 * time.Second, 20 * time.Second

func statsProvider(t *testing.T) (*Provider, func(time.Duration)) {
	t.Helper()
	p, clk := newTestProvider(t, Config{Memory: "1Gi", StartDelay: Duration{Duration: statsStart}})
	ctx := context.Background()
	web := testPod("web", "uid-web")
	web.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("200m"),
		corev1.ResourceMemory: resource.MustParse("64Mi"),
	}
	db := testPod("db", "uid-db")
	db.Spec.Containers = append(db.Spec.Containers, corev1.Container{Name: "backup", Image: "busybox"})
	for _, pod := range []*corev1.Pod{web, db} {
		if err := p.CreatePod(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	clk.Step(statsNow)
	if err := p.CreatePod(ctx, testPod("later", "uid-later")); err != nil {
		t.Fatal(err)
	}
	return p, clk.Step
}

func TestGetStatsSummary(t *testing.T) {
	p, step := statsProvider(t)
	s, err := p.GetStatsSummary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(statsNow)

	n := s.Node
	if n.NodeName != "node-1" || !n.StartTime.Time.Equal(t0) || n.CPU == nil || n.Memory == nil {
		t.Fatalf("node stats = %+v", n)
	}
	// 100m system + 100m web + 2×10m db; 256Mi + 32Mi + 2×16Mi.
	wantNodeCores, wantNodeWS := uint64(220_000_000), uint64(320<<20)
	if *n.CPU.UsageNanoCores != wantNodeCores || *n.Memory.WorkingSetBytes != wantNodeWS {
		t.Errorf("node usage %d nanocores %d bytes, want %d and %d", *n.CPU.UsageNanoCores, *n.Memory.WorkingSetBytes, wantNodeCores, wantNodeWS)
	}
	// The first sample integrates the current rate since the node started.
	if *n.CPU.UsageCoreNanoSeconds != wantNodeCores*20 {
		t.Errorf("node cumulative CPU %d, want %d", *n.CPU.UsageCoreNanoSeconds, wantNodeCores*20)
	}
	if *n.Memory.AvailableBytes != 1<<30-wantNodeWS {
		t.Errorf("node available memory %d, want %d", *n.Memory.AvailableBytes, 1<<30-wantNodeWS)
	}
	if !n.CPU.Time.Time.Equal(now) || !n.Memory.Time.Time.Equal(now) {
		t.Errorf("node stats times %s %s, want %s", n.CPU.Time, n.Memory.Time, now)
	}

	if len(s.Pods) != 2 {
		t.Fatalf("%d pods in the summary, want the 2 running ones", len(s.Pods))
	}
	db, web := s.Pods[0], s.Pods[1]
	if web.PodRef.Name != "web" || web.PodRef.Namespace != "default" || web.PodRef.UID != "uid-web" || !web.StartTime.Time.Equal(t0.Add(statsStart)) {
		t.Errorf("web pod ref %+v start %s", web.PodRef, web.StartTime)
	}
	if len(web.Containers) != 1 || web.Containers[0].Name != "app" {
		t.Fatalf("web containers %+v", web.Containers)
	}
	c := web.Containers[0]
	if *c.CPU.UsageNanoCores != 100_000_000 || *c.CPU.UsageCoreNanoSeconds != 1_000_000_000 || *c.Memory.WorkingSetBytes != 32<<20 {
		t.Errorf("web/app usage %d nanocores, %d core-ns, %d bytes", *c.CPU.UsageNanoCores, *c.CPU.UsageCoreNanoSeconds, *c.Memory.WorkingSetBytes)
	}
	if len(db.Containers) != 2 || *db.CPU.UsageNanoCores != 20_000_000 || *db.Memory.WorkingSetBytes != 32<<20 {
		t.Errorf("db pod: %d containers, %d nanocores, %d bytes", len(db.Containers), *db.CPU.UsageNanoCores, *db.Memory.WorkingSetBytes)
	}

	// The node's cumulative CPU never goes down, even when pods go away.
	before := *n.CPU.UsageCoreNanoSeconds
	if err := p.DeletePod(context.Background(), testPod("web", "uid-web")); err != nil {
		t.Fatal(err)
	}
	step(30 * time.Second)
	s, err = p.GetStatsSummary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pod := range s.Pods {
		names = append(names, pod.PodRef.Name)
	}
	if strings.Join(names, ",") != "db,later" { // later has started meanwhile
		t.Errorf("pods %v after web stopped, want db and later", names)
	}
	if after := *s.Node.CPU.UsageCoreNanoSeconds; after <= before {
		t.Errorf("node cumulative CPU went from %d to %d", before, after)
	}
}

func TestGetMetricsResource(t *testing.T) {
	p, _ := statsProvider(t)
	families, err := p.GetMetricsResource(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
			t.Fatalf("encoding %s: %v", f.GetName(), err)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(&text)
	if err != nil {
		t.Fatalf("parsing the encoded metrics: %v\n%s", err, text.String())
	}

	nowMs := t0.Add(statsNow).UnixMilli()
	started := float64(t0.Add(statsStart).Unix())
	for _, tc := range []struct {
		name   string
		typ    dto.MetricType
		labels []string // label names, sorted
		want   map[string]float64
	}{
		{"node_cpu_usage_seconds_total", dto.MetricType_COUNTER, nil, map[string]float64{"": 4.4}},
		{"node_memory_working_set_bytes", dto.MetricType_GAUGE, nil, map[string]float64{"": 320 << 20}},
		{"pod_cpu_usage_seconds_total", dto.MetricType_COUNTER, []string{"namespace", "pod"},
			map[string]float64{"default/db": 0.2, "default/web": 1}},
		{"pod_memory_working_set_bytes", dto.MetricType_GAUGE, []string{"namespace", "pod"},
			map[string]float64{"default/db": 32 << 20, "default/web": 32 << 20}},
		{"container_cpu_usage_seconds_total", dto.MetricType_COUNTER, []string{"container", "namespace", "pod"},
			map[string]float64{"app/default/db": 0.1, "backup/default/db": 0.1, "app/default/web": 1}},
		{"container_memory_working_set_bytes", dto.MetricType_GAUGE, []string{"container", "namespace", "pod"},
			map[string]float64{"app/default/db": 16 << 20, "backup/default/db": 16 << 20, "app/default/web": 32 << 20}},
		{"container_start_time_seconds", dto.MetricType_GAUGE, []string{"container", "namespace", "pod"},
			map[string]float64{"app/default/db": started, "backup/default/db": started, "app/default/web": started}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := parsed[tc.name]
			if f == nil {
				t.Fatalf("family missing from:\n%s", text.String())
			}
			if f.GetType() != tc.typ || f.GetHelp() == "" {
				t.Errorf("type %s help %q, want %s and a help text", f.GetType(), f.GetHelp(), tc.typ)
			}
			got := map[string]float64{}
			for _, m := range f.Metric {
				var names, values []string
				for _, l := range m.Label {
					names = append(names, l.GetName())
					values = append(values, l.GetValue())
				}
				if !sort.StringsAreSorted(names) || strings.Join(names, ",") != strings.Join(tc.labels, ",") {
					t.Errorf("labels %v, want %v", names, tc.labels)
				}
				if m.GetTimestampMs() != nowMs {
					t.Errorf("timestamp %d, want %d", m.GetTimestampMs(), nowMs)
				}
				v := m.GetGauge().GetValue()
				if tc.typ == dto.MetricType_COUNTER {
					v = m.GetCounter().GetValue()
				}
				got[strings.Join(values, "/")] = v
			}
			if len(got) != len(tc.want) {
				t.Errorf("series %v, want %v", got, tc.want)
			}
			for k, want := range tc.want {
				if v, ok := got[k]; !ok || v < want*0.999 || v > want*1.001 {
					t.Errorf("%s = %v, want %v", k, v, want)
				}
			}
		})
	}
	if f := parsed["scrape_error"]; f == nil || len(f.Metric) != 1 || f.Metric[0].GetGauge().GetValue() != 0 {
		t.Errorf("scrape_error = %v, want one sample of 0", f)
	}
}

func TestGetMetricsResourceWithoutPods(t *testing.T) {
	p, _ := newTestProvider(t, Config{})
	families, err := p.GetMetricsResource(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
			t.Errorf("encoding %s: %v", f.GetName(), err)
		}
	}
	if !strings.Contains(text.String(), "node_cpu_usage_seconds_total") {
		t.Errorf("no node metrics in:\n%s", text.String())
	}
}
