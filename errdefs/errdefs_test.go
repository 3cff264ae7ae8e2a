package errdefs

import (
	"errors"
	"fmt"
	"testing"
)

func TestClassesSurviveWrapping(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		class error
	}{
		{"not found", NotFound("pod %s missing", "ns/a"), ErrNotFound},
		{"invalid", InvalidInput("bad port %d", -1), ErrInvalidInput},
		{"not implemented", NotImplemented("exec"), ErrNotImplemented},
		{"unavailable", Unavailable("backend down"), ErrUnavailable},
		{"as not found", AsNotFound(errors.New("gone")), ErrNotFound},
		{"as invalid", AsInvalidInput(errors.New("nope")), ErrInvalidInput},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wrapped := fmt.Errorf("ns/pod: %w", tc.err)
			if !errors.Is(wrapped, tc.class) {
				t.Fatalf("errors.Is(%v, %v) = false", wrapped, tc.class)
			}
			for _, other := range []error{ErrNotFound, ErrInvalidInput, ErrNotImplemented, ErrUnavailable} {
				if other != tc.class && errors.Is(wrapped, other) {
					t.Fatalf("%v also matched class %v", wrapped, other)
				}
			}
		})
	}
}

func TestAsKeepsCause(t *testing.T) {
	cause := errors.New("root cause")
	err := AsNotFound(cause)
	if !errors.Is(err, cause) {
		t.Fatalf("cause lost: %v", err)
	}
	if err.Error() != "root cause" {
		t.Fatalf("message changed: %q", err.Error())
	}
	if AsNotFound(nil) != nil || AsInvalidInput(nil) != nil {
		t.Fatal("nil must stay nil")
	}
}
