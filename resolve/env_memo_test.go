package resolve

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func memoService(ns, name, ip, rv string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv},
		Spec:       corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 443}}},
	}
}

func TestServiceEnvMemoSharesUntilAServiceChanges(t *testing.T) {
	var m serviceEnvMemo
	api := memoService("default", "kubernetes", "10.0.0.1", "1")
	web := memoService("shop", "web", "10.0.0.7", "5")

	first := m.get("shop", true, []*corev1.Service{api, web})
	// Same objects in another order (an informer lists in no order): shared.
	if again := m.get("shop", true, []*corev1.Service{web, api}); again != first {
		t.Fatal("the same Services gave a new list")
	}
	if v, _ := first.get("WEB_SERVICE_HOST"); v != "10.0.0.7" {
		t.Fatalf("WEB_SERVICE_HOST = %q", v)
	}
	// Without links, or for another namespace, the variables differ.
	if m.get("shop", false, []*corev1.Service{api, web}) == first || m.get("other", true, []*corev1.Service{api, web}) == first {
		t.Fatal("a list was shared across namespaces or link settings")
	}
	// A changed Service is a new object (even with a resourceVersion a fake client
	// never bumps): the new address shows.
	moved := memoService("shop", "web", "10.0.0.9", "5")
	if v, _ := m.get("shop", true, []*corev1.Service{api, moved}).get("WEB_SERVICE_HOST"); v != "10.0.0.9" {
		t.Fatalf("after the change WEB_SERVICE_HOST = %q", v)
	}
}

func TestServiceEnvMemoIsBounded(t *testing.T) {
	var m serviceEnvMemo
	for i := 0; i < 3*maxServiceEnvs; i++ {
		m.get(fmt.Sprintf("ns-%d", i), true, nil)
	}
	if len(m.m) > maxServiceEnvs {
		t.Fatalf("memo holds %d lists, bound is %d", len(m.m), maxServiceEnvs)
	}
}
