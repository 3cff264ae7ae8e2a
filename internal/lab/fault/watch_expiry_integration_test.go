package fault_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vkubelet/vkubelet/internal/lab/testenv"
	"github.com/vkubelet/vkubelet/internal/process/agent"
)

// podLists is how many times the node listed pods — a plain list, or a list
// streamed as a watch (client-go's WatchListClient) — read from its metrics
// endpoint.
func podLists(t *testing.T, metricsAddr string) int {
	t.Helper()
	return int(testenv.MetricSum(t, metricsAddr, "vkubelet_api_requests_total", `verb="GET"`, `resource="pods"`) +
		testenv.MetricSum(t, metricsAddr, "vkubelet_api_requests_total", `verb="GET"`, `resource="pods (watch list)"`))
}

// compactEtcd compacts etcd's history up to its current revision, through etcd's
// JSON gateway, so that no watch can resume from before it.
func compactEtcd(t *testing.T, etcdURL string) int64 {
	t.Helper()
	post := func(path, body string) map[string]any {
		resp, err := http.Post(etcdURL+path, "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("etcd %s: %d %v %v", path, resp.StatusCode, err, out)
		}
		return out
	}
	// Two writes of a key no one watches first: the compaction must pass every
	// revision a client can hold. Without them the node may hold the newest
	// revision, from which its watch can resume (against v1.34.4 it did).
	for range 2 {
		post("/v3/kv/put", `{"key":"L3ZrdWJlbGV0LXRlc3QvYWR2YW5jZQ==","value":"eA=="}`) // /vkubelet-test/advance
	}
	rev, err := strconv.ParseInt(post("/v3/kv/range", `{"key":"AA=="}`)["header"].(map[string]any)["revision"].(string), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	post("/v3/kv/compaction", fmt.Sprintf(`{"revision":"%d","physical":true}`, rev))
	return rev
}

// TestAnExpiredWatchRelistsWithoutResyncingPodsToTheProvider makes the node's pod
// watch expire — the API server restarts with a fresh watch cache over an etcd
// compacted to its newest revision, so the watch cannot resume (410 Gone) — and
// checks that the node lists its pods again without handing a single unchanged
// pod to the provider, and runs a new pod at once.
func TestAnExpiredWatchRelistsWithoutResyncingPodsToTheProvider(t *testing.T) {
	const node, pods = "vk-expiry", 20
	cp := testenv.ControlPlane(t)
	ns := testenv.Namespace(t)
	c := testenv.Client(t)
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := l.Addr().String()
	l.Close()
	p, _ := startNode(t, node, func(cfg *agent.Config) { cfg.MetricsAddr = metricsAddr })

	var names []string
	for i := range pods {
		name := fmt.Sprintf("steady-%d", i)
		if _, err := c.CoreV1().Pods(ns).Create(ctx, boundPod(ns, name, node), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	for _, name := range names {
		waitRunning(t, c, ns, name, time.Now(), time.Minute)
	}
	listsBefore := podLists(t, metricsAddr)

	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	rev := compactEtcd(t, cp.EtcdURL)
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.CoreV1().Pods(ns).Create(ctx, boundPod(ns, "after-expiry", node), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, took := waitRunning(t, c, ns, "after-expiry", start, time.Minute)
	listsAfter := podLists(t, metricsAddr)
	t.Logf("etcd compacted at revision %d; the node listed its pods %d more time(s); a new pod Running %s after the API server's return",
		rev, listsAfter-listsBefore, took.Round(time.Millisecond))
	if listsAfter <= listsBefore {
		t.Errorf("the node did not list its pods again (%d lists before, %d after): the watch did not expire", listsBefore, listsAfter)
	}
	for _, name := range names {
		pod, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n, u, v := p.CreateCount(pod.UID), p.UpdateCalls(pod.UID), p.VolumeUpdates(ns, name); n != 1 || u != 0 || v != 0 {
			t.Errorf("pod %s after the relist: %d creates, %d UpdatePod, %d UpdatePodVolumes; want 1, 0, 0", name, n, u, v)
		}
	}
}
