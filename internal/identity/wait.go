package identity

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/certificate"
)

// awaited is the certificate a node waits for, as its messages name it.
type awaited struct {
	node   string
	kind   string // "client" or "serving"
	signer string
	// timeout bounds the wait; zero waits until ctx ends, as the kubelet does
	// while its CSR is not approved.
	timeout time.Duration
	log     *slog.Logger
	// waiting is logged at once and then every minute of the wait; "" logs
	// nothing (a node that approves its own CSR waits for no one).
	waiting string
}

// certificatePoll is how often a node looks whether its first certificate
// has come.
const certificatePoll = 200 * time.Millisecond

// startManager starts m, which runs until ctx ends, and returns once m holds
// a certificate. If it gets none before the timeout or the end of ctx, m is
// stopped and the error says why.
//
// client-go's csr.WaitForCertificate waits for one CSR; here the certificate
// manager sends the CSR and waits for it itself, so what the node waits for is
// the manager's certificate, polled with apimachinery's wait.
func startManager(ctx context.Context, m certificate.Manager, a awaited) error {
	m.Start()
	go func() { <-ctx.Done(); m.Stop() }()

	poll := ctx
	if a.timeout > 0 {
		var cancel context.CancelFunc
		poll, cancel = context.WithTimeout(ctx, a.timeout)
		defer cancel()
	}
	var lastLog time.Time
	err := wait.PollUntilContextCancel(poll, certificatePoll, true, func(context.Context) (bool, error) {
		if m.Current() != nil {
			return true, nil
		}
		if a.waiting != "" && time.Since(lastLog) > time.Minute {
			a.log.Info(a.waiting, "node", a.node)
			lastLog = time.Now()
		}
		return false, nil
	})
	if err == nil {
		return nil
	}
	m.Stop()
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no %s certificate after %s: is the %s CSR of node %s approved? (kubectl get csr)", a.kind, a.timeout, a.signer, a.node)
	}
	return err
}
