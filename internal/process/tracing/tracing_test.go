package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

func attrs(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES describe the spans' resource,
// as in every OpenTelemetry SDK; the node's own flags win over them, and the
// node's name is always the node's.
func TestTheResourceHonoursTheStandardVariables(t *testing.T) {
	for _, tc := range []struct {
		name              string
		service, resource string
		cfg               Config
		want              map[string]string
	}{
		{"nothing said", "", "", Config{NodeName: "n"},
			map[string]string{"service.name": "vkubelet", "k8s.node.name": "n"}},
		{"OTEL_SERVICE_NAME", "vk-east", "", Config{NodeName: "n"},
			map[string]string{"service.name": "vk-east", "k8s.node.name": "n"}},
		{"OTEL_RESOURCE_ATTRIBUTES", "", "deployment.environment=prod,service.name=from-attrs,k8s.node.name=other", Config{NodeName: "n"},
			map[string]string{"service.name": "from-attrs", "deployment.environment": "prod", "k8s.node.name": "n"}},
		{"OTEL_SERVICE_NAME over the attributes' service.name", "vk-east", "service.name=from-attrs", Config{NodeName: "n"},
			map[string]string{"service.name": "vk-east", "k8s.node.name": "n"}},
		{"the flags over both", "vk-east", "team=a", Config{NodeName: "n", ServiceName: "flag", Attributes: map[string]string{"team": "b"}},
			map[string]string{"service.name": "flag", "team": "b", "k8s.node.name": "n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_SERVICE_NAME", tc.service)
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", tc.resource)
			got := attrs(resourceAttributes(tc.cfg, fromEnv(context.Background())))
			if len(got) != len(tc.want) {
				t.Fatalf("resource %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("resource %v, want %v", got, tc.want)
				}
			}
		})
	}
}
