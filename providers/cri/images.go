package cri

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vkubelet/vkubelet/provider"
)

// pullTimeout bounds one image pull.
const pullTimeout = 10 * time.Minute

// pullPolicy is c's policy, defaulted as the API server does when it is empty.
func pullPolicy(c *corev1.Container) corev1.PullPolicy {
	if c.ImagePullPolicy != "" {
		return c.ImagePullPolicy
	}
	ref := c.Image
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		ref = ref[i+1:]
	}
	if strings.Contains(ref, "@") {
		return corev1.PullIfNotPresent
	}
	if i := strings.LastIndex(ref, ":"); i < 0 || ref[i+1:] == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// The Events the kubelet records on a container as it starts it, with these
// reasons: conformance tests wait for "Started", users read the others in
// kubectl describe.
const (
	reasonPulling = "Pulling"
	reasonPulled  = "Pulled"
	reasonCreated = "Created"
	reasonStarted = "Started"
)

// ensureImage makes c's image present according to its pull policy, pulled for
// the pod's sandbox sb. It notes, as Events with the kubelet's reasons, an
// image found present, a pull begun and a pull done.
func (p *Provider) ensureImage(ctx context.Context, sb *runtimeapi.PodSandboxConfig, c *corev1.Container, creds []provider.RegistryCredential, note func(reason, message string)) error {
	policy := pullPolicy(c)
	spec := &runtimeapi.ImageSpec{Image: c.Image}
	if policy != corev1.PullAlways {
		sctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		st, err := p.images.ImageStatus(sctx, &runtimeapi.ImageStatusRequest{Image: spec})
		cancel()
		if err != nil {
			return fmt.Errorf("image %s: %w", c.Image, err)
		}
		if st.Image != nil {
			note(reasonPulled, fmt.Sprintf("Container image %q already present on machine", c.Image))
			return nil
		}
		if policy == corev1.PullNever {
			return fmt.Errorf("container image %q is not present with pull policy of Never", c.Image)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	auths := authsFor(c.Image, creds)
	note(reasonPulling, fmt.Sprintf("Pulling image %q", c.Image))
	start := time.Now()
	var lastErr error
	for _, auth := range auths {
		_, err := p.images.PullImage(pctx, &runtimeapi.PullImageRequest{Image: spec, Auth: auth, SandboxConfig: sb})
		if err == nil {
			note(reasonPulled, fmt.Sprintf("Successfully pulled image %q in %v", c.Image, time.Since(start).Truncate(time.Millisecond)))
			return nil
		}
		lastErr = err
	}
	return fmt.Errorf("pulling image %s: %w", c.Image, lastErr)
}

// registryHost is the registry part of an image reference, as docker names it.
func registryHost(image string) string {
	i := strings.IndexByte(image, '/')
	if i < 0 {
		return "docker.io"
	}
	first := image[:i]
	if strings.ContainsAny(first, ".:") || first == "localhost" {
		return first
	}
	return "docker.io"
}

// normalizeRegistry turns a docker config key (host, host/path or URL) into a host
// and a path prefix.
func normalizeRegistry(key string) (host, path string) {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	host, path, _ = strings.Cut(key, "/")
	switch host {
	case "index.docker.io", "registry-1.docker.io", "docker.io":
		host, path = "docker.io", ""
	}
	return host, path
}

// authsFor returns the credentials to try for image, best match first, ending with
// anonymous (nil) access.
func authsFor(image string, creds []provider.RegistryCredential) []*runtimeapi.AuthConfig {
	host := registryHost(image)
	repo := strings.TrimPrefix(image, host+"/")
	var out []*runtimeapi.AuthConfig
	for _, c := range creds {
		h, path := normalizeRegistry(c.Registry)
		if h != host || (path != "" && path != "v1" && path != "v2" && !strings.HasPrefix(repo, path)) {
			continue
		}
		a := &runtimeapi.AuthConfig{Username: c.Username, Password: c.Password, Auth: c.Auth, IdentityToken: c.IdentityToken}
		if a.Username == "" && a.Auth != "" {
			if raw, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
				a.Username, a.Password, _ = strings.Cut(string(raw), ":")
			}
		}
		out = append(out, a)
	}
	return append(out, nil)
}
