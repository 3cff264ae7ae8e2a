package resolve

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/vkubelet/vkubelet/internal/wire/apiwire"
)

// requestToken asks the API server for a token of service account sa
// (TokenRequest), once per pod start and per refresh. Sent as client-go's typed
// client sends it, and read into a reused buffer (internal/wire/apiwire) rather than
// client-go's fresh one per answer; a protobuf answer is decoded from there.
// A clientset without a REST client of its own (client-go's fakes) goes
// through its typed client.
func requestToken(ctx context.Context, client kubernetes.Interface, namespace, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	rc, ok := client.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil || rc.Client == nil {
		return client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	}
	answer, err := rc.Post().Namespace(namespace).Resource("serviceaccounts").Name(sa).SubResource("token").
		Body(req).Stream(ctx)
	if err != nil {
		return nil, err
	}
	out := &authenticationv1.TokenRequest{}
	err = apiwire.Read(answer, func(data []byte) error {
		kind, raw, ok := apiwire.Envelope(data)
		if !ok { // JSON, for a client configured for it
			return runtime.DecodeInto(scheme.Codecs.UniversalDeserializer(), data, out)
		}
		if string(kind) != "TokenRequest" {
			return fmt.Errorf("the API server answered a TokenRequest with a %s", kind)
		}
		return out.Unmarshal(raw)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the API server's answer to a TokenRequest: %w", err)
	}
	return out, nil
}
