package agent

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/metrics"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
)

// metricsDoc is the operators' list of the metrics a node serves.
const metricsDoc = "../../../docs/METRICS.md"

// documentedPrefixes are the metrics docs/METRICS.md must list one by one; the
// Go runtime's and the process's are named by their collector only.
var documentedPrefixes = []string{"vkubelet_", "rest_client_"}

// TestMetricsDocListsEveryMetric builds the registries a node serves, as New
// (a node with a client of its own) and NewShared (the nodes of a NodeSet on one
// credential) build them, and checks that docs/METRICS.md's tables list every
// vkubelet_* and rest_client_* metric in them, with its labels and (where the
// family has samples to tell) its type, and nothing that is no longer there.
func TestMetricsDocListsEveryMetric(t *testing.T) {
	ctx := t.Context()
	apiServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}))
	defer apiServer.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	restCfg := func() *rest.Config { return &rest.Config{Host: apiServer.URL} }

	// The fake server answers nothing: the features are given, not read.
	every := apifeatures.Without()
	n, err := New(ctx, Config{NodeName: "metrics-doc", Provider: "mock", RESTConfig: restCfg(),
		InternalIP: "127.0.0.1", Logger: logger, APIFeatures: every})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = n.kubeletListener.Close()
		n.stopCerts()
		closeProvider(n.provider)
	}()
	shared, err := NewShared(ctx, Config{RESTConfig: restCfg(), Logger: logger, APIFeatures: every})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.stop()

	// One request through each client gives the request counters and client-go's
	// latencies and results samples; client-go retries only on answers the fake
	// server does not give, so its retry hook is called as client-go calls it.
	for _, c := range []kubernetes.Interface{n.client, shared.client} {
		_, _ = c.CoreV1().Pods("default").Get(ctx, "absent", metav1.GetOptions{})
	}
	metrics.RequestRetry.IncrementRetry(ctx, "429", "GET", strings.TrimPrefix(apiServer.URL, "http://"))

	served := map[string]servedMetric{}
	for _, g := range []prometheus.Gatherer{n.gatherer, shared.registry} {
		collectServed(t, g, served)
	}
	documented := documentedMetrics(t)

	var problems []string
	for _, name := range sortedKeys(served) {
		s, d := served[name], documented[name]
		switch {
		case d == nil:
			problems = append(problems, name+": served but not in docs/METRICS.md")
			continue
		case !slices.Equal(s.labels, d.labels):
			problems = append(problems, name+": labels "+strings.Join(s.labels, ",")+" but docs/METRICS.md says "+strings.Join(d.labels, ","))
		}
		if s.typ != "" && s.typ != d.typ {
			problems = append(problems, name+": a "+s.typ+" but docs/METRICS.md says "+d.typ)
		}
	}
	for _, name := range sortedKeys(documented) {
		if _, ok := served[name]; !ok {
			problems = append(problems, name+": in docs/METRICS.md but no longer served")
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	if len(served) == 0 {
		t.Fatal("no vkubelet_* or rest_client_* metric found: the registries were not built")
	}
	typed := 0
	for _, s := range served {
		if s.typ != "" {
			typed++
		}
	}
	t.Logf("%d metrics checked against docs/METRICS.md, %d of them with samples (their type checked too)", len(served), typed)
}

// servedMetric is what a registry says of one metric: its variable labels
// (sorted) and, if it has samples, its type.
type servedMetric struct {
	labels []string
	typ    string
}

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

// collectServed adds g's vkubelet_* and rest_client_* metrics to served: every
// registered one by its description (vectors without samples included), with
// its type from what g gathers.
func collectServed(t *testing.T, g prometheus.Gatherer, served map[string]servedMetric) {
	t.Helper()
	reg, ok := g.(*prometheus.Registry)
	if !ok {
		t.Fatalf("the node's gatherer is a %T, not a *prometheus.Registry", g)
	}
	descs := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(descs)
		close(descs)
	}()
	for d := range descs {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the description %s", d)
		}
		if !documentable(m[1]) {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		sort.Strings(labels)
		s := served[m[1]]
		s.labels = labels
		served[m[1]] = s
	}
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if !documentable(f.GetName()) {
			continue
		}
		s := served[f.GetName()]
		s.typ = typeName(f.GetType())
		served[f.GetName()] = s
	}
}

func documentable(name string) bool {
	for _, p := range documentedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func typeName(t dto.MetricType) string {
	switch t {
	case dto.MetricType_COUNTER:
		return "counter"
	case dto.MetricType_GAUGE:
		return "gauge"
	case dto.MetricType_HISTOGRAM:
		return "histogram"
	case dto.MetricType_SUMMARY:
		return "summary"
	}
	return strings.ToLower(t.String())
}

// documentedMetric is a row of docs/METRICS.md: | `name` | type | `label`, … | meaning |.
type documentedMetric struct {
	labels []string
	typ    string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// documentedMetrics reads the vkubelet_* and rest_client_* rows of docs/METRICS.md's tables.
func documentedMetrics(t *testing.T) map[string]*documentedMetric {
	t.Helper()
	b, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*documentedMetric{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		if !documentable(name) {
			continue
		}
		if out[name] != nil {
			t.Errorf("docs/METRICS.md lists %s twice", name)
		}
		d := &documentedMetric{typ: strings.TrimSpace(cells[2])}
		for _, m := range backticked.FindAllStringSubmatch(cells[3], -1) {
			d.labels = append(d.labels, m[1])
		}
		sort.Strings(d.labels)
		out[name] = d
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
