package resolve

import (
	"errors"
	"fmt"
	"strings"
)

// MissingError reports a mandatory reference of a pod that cannot be resolved: an
// object that does not exist, or a key it lacks. The pod cannot start until it
// appears; the kubelet reports it as CreateContainerConfigError with this message.
type MissingError struct {
	Kind      string // "ConfigMap" or "Secret"
	Namespace string
	Name      string
	// Key is the missing key; empty when the whole object is missing.
	Key string
	// Volume is the volume that references it; empty for an environment variable.
	Volume string
}

func (e *MissingError) Error() string {
	var msg string
	switch {
	case e.Key == "":
		// The kubelet's object caches answer with a NotFound of resource "configmap"
		// or "secret": `secret "foo" not found`.
		msg = fmt.Sprintf("%s %q not found", strings.ToLower(e.Kind), e.Name)
	default:
		msg = fmt.Sprintf("couldn't find key %s in %s %s/%s", e.Key, e.Kind, e.Namespace, e.Name)
	}
	if e.Volume != "" {
		return fmt.Sprintf("volume %q: %s", e.Volume, msg)
	}
	return msg
}

// Reason is the reason of the Event about the missing reference, as upstream
// virtual-kubelet names it (MandatoryConfigMapNotFound, MandatorySecretKeyNotFound,
// …), so that alerts written for it keep working; the container's waiting reason
// stays the kubelet's CreateContainerConfigError.
func (e *MissingError) Reason() string { return notFoundReason("Mandatory", e.Kind, e.Key) }

// notFoundReason is upstream virtual-kubelet's Event reason for a missing object
// (or key of it) that a pod references: "Mandatory" or "Optional", the kind, "Key"
// if a key is missing, "NotFound".
func notFoundReason(mandatory, kind, key string) string {
	if key != "" {
		return mandatory + kind + "KeyNotFound"
	}
	return mandatory + kind + "NotFound"
}

// IsMissing reports whether err is, or wraps, a *MissingError.
func IsMissing(err error) bool {
	var m *MissingError
	return errors.As(err, &m)
}
