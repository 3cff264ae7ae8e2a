package resolve

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// dockerConfigEntry is one registry of a docker config file.
type dockerConfigEntry struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
}

// pullCredentials reads the pod's imagePullSecrets. As in the kubelet, a missing
// secret does not stop the pod (the pull may not need it): it is reported in an
// Event and skipped.
func (r *resolution) pullCredentials() ([]provider.RegistryCredential, error) {
	var out []provider.RegistryCredential
	for _, ref := range r.pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		s, err := r.secret(ref.Name)
		if err != nil {
			return nil, err
		}
		if s == nil {
			r.note(corev1.EventTypeWarning, ReasonFailedToRetrievePullSecret,
				fmt.Sprintf("Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", ref.Name))
			continue
		}
		creds, err := registryCredentials(s)
		if err != nil {
			r.note(corev1.EventTypeWarning, ReasonFailedToRetrievePullSecret,
				fmt.Sprintf("Image pull secret %s/%s is not a valid docker config: %v", s.Namespace, s.Name, err))
			continue
		}
		out = append(out, creds...)
	}
	return out, nil
}

// registryCredentials parses a kubernetes.io/dockerconfigjson (.dockerconfigjson,
// {"auths": {...}}) or kubernetes.io/dockercfg (.dockercfg, {...}) secret, one
// credential per registry in registry order. A missing username/password is taken
// from auth, and auth is computed from them when absent.
func registryCredentials(s *corev1.Secret) ([]provider.RegistryCredential, error) {
	var entries map[string]dockerConfigEntry
	if b, ok := s.Data[corev1.DockerConfigJsonKey]; ok {
		var cfg struct {
			Auths map[string]dockerConfigEntry `json:"auths"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, err
		}
		entries = cfg.Auths
	} else if b, ok := s.Data[corev1.DockerConfigKey]; ok {
		if err := json.Unmarshal(b, &entries); err != nil {
			return nil, err
		}
	} else {
		return nil, fmt.Errorf("no %s or %s key", corev1.DockerConfigJsonKey, corev1.DockerConfigKey)
	}
	var out []provider.RegistryCredential
	for _, reg := range sortedKeys(entries) {
		e := entries[reg]
		c := provider.RegistryCredential{Registry: reg, Username: e.Username, Password: e.Password, Auth: e.Auth, IdentityToken: e.IdentityToken}
		if c.Username == "" && c.Password == "" && c.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(c.Auth)
			if err != nil {
				return nil, fmt.Errorf("registry %s: auth is not base64: %w", reg, err)
			}
			user, pass, ok := strings.Cut(string(dec), ":")
			if !ok {
				return nil, fmt.Errorf("registry %s: auth is not user:password", reg)
			}
			c.Username, c.Password = user, pass
		}
		if c.Auth == "" && (c.Username != "" || c.Password != "") {
			c.Auth = base64.StdEncoding.EncodeToString([]byte(c.Username + ":" + c.Password))
		}
		out = append(out, c)
	}
	return out, nil
}
