// Package errdefs classifies the errors that cross the provider contract, so the
// controllers and the kubelet API can react to what went wrong (404 or 500, retry or
// give up) without knowing which provider produced the error.
//
// A provider wraps its error with one of the constructors (NotFound, InvalidInput, …)
// or returns an error whose chain contains one of the sentinel values; callers test
// with errors.Is. The package imports nothing of ours: every other package may use it.
package errdefs

import (
	"errors"
	"fmt"
)

// The sentinel classes. Test with errors.Is(err, errdefs.ErrNotFound).
var (
	// ErrNotFound: the object (pod, container, …) does not exist in the provider.
	ErrNotFound = errors.New("not found")
	// ErrInvalidInput: the request can never succeed as given; retrying is pointless.
	ErrInvalidInput = errors.New("invalid input")
	// ErrNotImplemented: the provider does not offer this capability.
	ErrNotImplemented = errors.New("not implemented")
	// ErrUnavailable: a transient failure (back end unreachable, overloaded); retry later.
	ErrUnavailable = errors.New("unavailable")
)

// classified keeps the message of its caller and answers errors.Is for its class and
// for the wrapped cause.
type classified struct {
	class error
	msg   string
	cause error
}

func (e *classified) Error() string { return e.msg }

func (e *classified) Is(target error) bool { return target == e.class }

func (e *classified) Unwrap() error { return e.cause }

func classify(class error, cause error, format string, args ...any) error {
	return &classified{class: class, msg: fmt.Sprintf(format, args...), cause: cause}
}

// NotFound returns an error of class ErrNotFound with the given message.
func NotFound(format string, args ...any) error {
	return classify(ErrNotFound, nil, format, args...)
}

// InvalidInput returns an error of class ErrInvalidInput with the given message.
func InvalidInput(format string, args ...any) error {
	return classify(ErrInvalidInput, nil, format, args...)
}

// NotImplemented returns an error of class ErrNotImplemented with the given message.
func NotImplemented(format string, args ...any) error {
	return classify(ErrNotImplemented, nil, format, args...)
}

// Unavailable returns an error of class ErrUnavailable with the given message.
func Unavailable(format string, args ...any) error {
	return classify(ErrUnavailable, nil, format, args...)
}

// AsNotFound classifies an existing error as not-found, keeping it as the cause.
func AsNotFound(err error) error {
	if err == nil {
		return nil
	}
	return classify(ErrNotFound, err, "%s", err.Error())
}

// AsInvalidInput classifies an existing error as invalid input, keeping it as the cause.
func AsInvalidInput(err error) error {
	if err == nil {
		return nil
	}
	return classify(ErrInvalidInput, err, "%s", err.Error())
}

// AsUnavailable classifies an existing error as unavailable, keeping it as the cause.
func AsUnavailable(err error) error {
	if err == nil {
		return nil
	}
	return classify(ErrUnavailable, err, "%s", err.Error())
}

// IsNotFound reports whether err is of class ErrNotFound.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsInvalidInput reports whether err is of class ErrInvalidInput.
func IsInvalidInput(err error) bool { return errors.Is(err, ErrInvalidInput) }

// IsNotImplemented reports whether err is of class ErrNotImplemented.
func IsNotImplemented(err error) bool { return errors.Is(err, ErrNotImplemented) }

// IsUnavailable reports whether err is of class ErrUnavailable.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }
