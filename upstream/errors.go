package upstream

import (
	"errors"

	vkerrdefs "github.com/virtual-kubelet/virtual-kubelet/errdefs"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/vkubelet/vkubelet/errdefs"
	"github.com/vkubelet/vkubelet/provider"
)

// The interfaces by which upstream classifies an error. Upstream's own tests
// (errdefs.IsNotFound) follow only pkg/errors' Cause chain; errors.As follows
// Unwrap as well, so an upstream error wrapped with %w is classified too.
type (
	upstreamNotFound     interface{ NotFound() bool }
	upstreamInvalidInput interface{ InvalidInput() bool }
	// exitStatus is k8s.io/utils/exec's ExitError, by which an upstream provider
	// reports a command's exit code from RunInContainer.
	exitStatus interface {
		ExitStatus() int
		Exited() bool
	}
)

// fromUpstream maps an error an upstream provider returned to vkubelet's classes,
// keeping it as the cause. An error already of one of vkubelet's classes, or of
// none known, is returned as it is (vkubelet retries an unclassified error).
func fromUpstream(err error) error {
	if err == nil || classified(err) {
		return err
	}
	switch {
	case isNotFound(err):
		return errdefs.AsNotFound(err)
	case isInvalidInput(err):
		return errdefs.AsInvalidInput(err)
	}
	return err
}

// fromUpstreamExec is fromUpstream for RunInContainer and AttachToContainer: a
// command that exited non-zero is an *provider.ExecError with its code.
func fromUpstreamExec(err error) error {
	var exit exitStatus
	if errors.As(err, &exit) && exit.Exited() {
		if exit.ExitStatus() == 0 {
			return nil
		}
		return &provider.ExecError{ExitCode: exit.ExitStatus()}
	}
	return fromUpstream(err)
}

func classified(err error) bool {
	for _, class := range []error{errdefs.ErrNotFound, errdefs.ErrInvalidInput, errdefs.ErrNotImplemented, errdefs.ErrUnavailable} {
		if errors.Is(err, class) {
			return true
		}
	}
	return false
}

func isNotFound(err error) bool {
	var nf upstreamNotFound
	if errors.As(err, &nf) && nf.NotFound() {
		return true
	}
	// Providers that stand for another cluster often pass its API's answer on.
	return vkerrdefs.IsNotFound(err) || apierrors.IsNotFound(err)
}

func isInvalidInput(err error) bool {
	var ii upstreamInvalidInput
	if errors.As(err, &ii) && ii.InvalidInput() {
		return true
	}
	return vkerrdefs.IsInvalidInput(err) || apierrors.IsBadRequest(err) || apierrors.IsInvalid(err)
}
