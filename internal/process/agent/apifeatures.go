package agent

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/vkubelet/vkubelet/internal/apifeatures"
)

// This file holds the node's reading of the API server's features at start
// (package apifeatures): the release and the APIs the node writes to, whose
// lack it refuses or does without.

// detected are the features of each API server this process read, by its
// address: the nodes of a NodeSet, each with an identity of its own, start
// together against one server, and would each read it and log the same lines.
var detected = struct {
	sync.Mutex
	sets map[string]*apifeatures.Set
}{sets: map[string]*apifeatures.Set{}}

// apiFeatures returns the features of the API server at host, read through d
// the first time this process asks, and logs once what is off and why. A read
// that fails for a reason that may pass (the server starting, the network) is
// tried again until ctx ends; a refusal (apifeatures.ErrUnsupported, naming
// the release needed), a credential the server turns away and a server that
// has no /version (no Kubernetes API server) are returned at once.
func apiFeatures(ctx context.Context, host string, d apifeatures.Discovery, log *slog.Logger) (*apifeatures.Set, error) {
	detected.Lock()
	defer detected.Unlock()
	if s, ok := detected.sets[host]; ok {
		return s, nil
	}
	s, err := detectFeatures(ctx, d, log, time.Second)
	if err != nil {
		return nil, err
	}
	logFeatures(s, log)
	detected.sets[host] = s
	return s, nil
}

// detectFeatures is apifeatures.Detect, tried again while it fails for a
// reason that may pass, first after delay, backing off (with jitter) to once
// every 30 s, until ctx ends. (wait.ExponentialBackoffWithContext would give up
// once the cap is reached; a DelayFunc goes on at the cap.)
func detectFeatures(ctx context.Context, d apifeatures.Discovery, log *slog.Logger, delay time.Duration) (*apifeatures.Set, error) {
	var (
		s       *apifeatures.Set
		lastErr error
	)
	backoff := wait.Backoff{Duration: delay, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 30 * time.Second}
	err := backoff.DelayFunc().Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		s, lastErr = apifeatures.Detect(ctx, d)
		if lastErr == nil || errors.Is(lastErr, apifeatures.ErrUnsupported) || apierrors.IsUnauthorized(lastErr) ||
			apierrors.IsForbidden(lastErr) || apierrors.IsNotFound(lastErr) {
			return true, lastErr
		}
		log.Warn("reading the API server's release and APIs; trying again", "error", lastErr)
		return false, nil
	})
	if err != nil && lastErr != nil {
		// Out of time: the reason the server could not be read says more than
		// the context's.
		return nil, lastErr
	}
	return s, err
}

// logFeatures says, once at start, which of the features the node writes to
// the API server lacks, and what the node does instead: never a silent
// difference from the newest release.
func logFeatures(s *apifeatures.Set, log *slog.Logger) {
	off := s.Off()
	if len(off) == 0 {
		log.Info("the API server has every API feature vkubelet uses", "kubernetes", s.Version)
		return
	}
	for _, o := range off {
		log.Info("API feature off", "kubernetes", s.Version, "feature", string(o.Feature), "why", o.Why)
	}
}

// configuredFeatures is cfg.APIFeatures if the caller set them, else those of
// the API server at host read through client (apiFeatures), within the
// node's startup timeout if it has one.
func configuredFeatures(ctx context.Context, cfg Config, host string, client kubernetes.Interface) (*apifeatures.Set, error) {
	if cfg.APIFeatures != nil {
		return cfg.APIFeatures, nil
	}
	if cfg.StartupTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.StartupTimeout)
		defer cancel()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return apiFeatures(ctx, host, client.Discovery(), log)
}
