// Package informerutil holds helpers for the informer caches of the controllers.
package informerutil

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// StripManagedFields is an informer transform that drops metadata.managedFields,
// which vkubelet never reads and which is often the largest part of a cached object.
func StripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
