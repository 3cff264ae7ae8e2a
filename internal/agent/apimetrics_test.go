package agent

import "testing"

func TestResourceOf(t *testing.T) {
	cases := map[string]string{
		"/api/v1/namespaces/ns/pods":                                       "pods",
		"/api/v1/namespaces/ns/pods/p":                                     "pods",
		"/api/v1/namespaces/ns/pods/p/status":                              "pods/status",
		"/api/v1/namespaces/ns/events":                                     "events",
		"/api/v1/nodes/n":                                                  "nodes",
		"/api/v1/nodes/n/status":                                           "nodes/status",
		"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n": "leases",
		"/api/v1/namespaces/ns":                                            "namespaces",
		"/healthz":                                                         "other",
	}
	for path, want := range cases {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}
