// Command incluster is what an in-cluster client does to find the API server,
// with the standard library only: the address from KUBERNETES_SERVICE_HOST and
// _PORT (or a name given as the argument, resolved through the pod's DNS), the
// ServiceAccount's CA to verify the server and its token to authenticate. It
// prints the API server's /version. The CRI provider's end-to-end tests run it in
// a pod, built static and mounted from the host.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"

func main() {
	server := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	if len(os.Args) > 1 {
		server = os.Args[1]
	}
	if err := get("https://" + server + "/version"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func get(url string) error {
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return err
	}
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %sca.crt", sa)
	}
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	fmt.Printf("%s\n", body)
	return nil
}
